{{/* Chart name, truncated to 63 characters (the DNS label limit). */}}
{{- define "glm-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name used as the prefix of every resource: fullnameOverride, or <release>-<chart> (just the
release name when it already contains the chart name), truncated to 63 characters.
*/}}
{{- define "glm-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* <chart>-<version>, for the helm.sh/chart label. */}}
{{- define "glm-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every resource. */}}
{{- define "glm-operator.labels" -}}
helm.sh/chart: {{ include "glm-operator.chart" . }}
{{ include "glm-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: glm-operator
{{- end }}

{{/* Selector labels: stable across upgrades, so no chart or app version here. */}}
{{- define "glm-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "glm-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Name of the operator's ServiceAccount. */}}
{{- define "glm-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "glm-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Operator image: repository@digest when a digest is given, else repository:tag. */}}
{{- define "glm-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* "true" when the operator serves every namespace (ClusterRole mode). */}}
{{- define "glm-operator.clusterWide" -}}
{{- if not .Values.watchNamespaces }}true{{ end }}
{{- end }}

{{/*
RBAC rules for namespaced resources: the same list in the ClusterRole (cluster-wide mode) and in
each watched namespace's Role. No Secrets: the operator never reads them.
*/}}
{{- define "glm-operator.namespacedRules" -}}
- apiGroups: ["inference.glm.dev"]
  resources: ["glmdeployments"]
  verbs: ["get", "list", "watch", "patch", "update"]
- apiGroups: ["inference.glm.dev"]
  resources: ["glmdeployments/status", "glmdeployments/scale"]
  verbs: ["get", "patch", "update"]
# Owner references with blockOwnerDeletion need this where OwnerReferencesPermissionEnforcement is on.
- apiGroups: ["inference.glm.dev"]
  resources: ["glmdeployments/finalizers"]
  verbs: ["update"]
# GLMGateway: the operator renders the gateway's Deployment, Service, ServiceAccount and the
# Role it binds (read GLMDeployments and Pods of the namespace; RBAC lets the operator grant
# only what it holds itself).
- apiGroups: ["inference.glm.dev"]
  resources: ["glmgateways"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["inference.glm.dev"]
  resources: ["glmgateways/status"]
  verbs: ["get", "patch", "update"]
- apiGroups: ["inference.glm.dev"]
  resources: ["glmgateways/finalizers"]
  verbs: ["update"]
# The recorded load test of a GLMDeployment (glm-operator loadtest --record writes it): read only.
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch"]
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: ["leaderworkerset.x-k8s.io"]
  resources: ["leaderworkersets"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
# PodMonitors per GLMDeployment (prometheus.podMonitor); with "off", only what deleting the ones an
# earlier setting created needs.
- apiGroups: ["monitoring.coreos.com"]
  resources: ["podmonitors"]
  {{- if eq (.Values.prometheus.podMonitor | default "auto") "off" }}
  verbs: ["get", "list", "watch", "delete"]
  {{- else }}
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
  {{- end }}
# spec.inferencePool: the InferencePool of a GLMDeployment, and the Role of its endpoint picker,
# which reads pods, InferencePools and the extension's optional InferenceObjectives (RBAC lets the
# operator grant only what it holds itself).
- apiGroups: ["inference.networking.k8s.io"]
  resources: ["inferencepools"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: ["inference.networking.x-k8s.io"]
  resources: ["inferenceobjectives", "inferencemodelrewrites"]
  verbs: ["get", "list", "watch"]
# The NetworkPolicy of each GLMGateway (gateway.networkPolicy); when off, only deleting the ones
# an earlier setting created.
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  {{- if .Values.gateway.networkPolicy.enabled }}
  verbs: ["get", "create", "update", "patch", "delete"]
  {{- else }}
  verbs: ["get", "delete"]
  {{- end }}
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}

{{/* RBAC rules for cluster-scoped reads, needed in both modes. */}}
{{- define "glm-operator.clusterScopedRules" -}}
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["get", "list", "watch"]
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["list", "watch"]
# kopf watches CRDs to discover the resources it serves.
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["get", "list", "watch"]
# Karpenter NodePools: GPU capacity the node autoscaler can still add (read only).
- apiGroups: ["karpenter.sh"]
  resources: ["nodepools"]
  verbs: ["get", "list", "watch"]
{{- end }}

{{/* Name of the leader-election Role and RoleBinding: the full name, shortened to keep 63 characters. */}}
{{- define "glm-operator.leaderElectionName" -}}
{{- printf "%s-leader-election" (include "glm-operator.fullname" . | trunc 46 | trimSuffix "-") }}
{{- end }}

{{/* Name of the metrics Service and ServiceMonitor: the full name, shortened to keep 63 characters. */}}
{{- define "glm-operator.metricsName" -}}
{{- printf "%s-metrics" (include "glm-operator.fullname" . | trunc 55 | trimSuffix "-") }}
{{- end }}
