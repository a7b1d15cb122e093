"""Generators and developer tools: what writes the committed artifacts, run from the checkout.

``crd`` builds the GLMDeployment and GLMGateway CustomResourceDefinitions from the pydantic models
(``crds/``, the chart's CRD templates); ``alerts`` and ``dashboards`` the chart's Prometheus rules
and Grafana dashboards (``charts/glm-operator/monitoring/``) from the metric names in ``series``;
``vllm_flags`` the extraArgs guard's flag list (``operator/glm_operator/api/vllm_flags.py``) from
vLLM's own parser. ``python -m devtools`` runs them (hack/generate.sh, ``make generate``,
``make vllm-flags``); the drift tests compare their output with the committed copies.

Not part of the operator: the wheel and the image hold ``operator/glm_operator`` only, and an
import contract (pyproject.toml) keeps ``glm_operator`` from importing this package.
"""
