#!/usr/bin/env bash
# Copy the prometheus-operator's PodMonitor, ServiceMonitor and PrometheusRule CRDs
# (monitoring.coreos.com/v1) out of its pinned Go module into the cache and print the PodMonitor
# file's path (the others lie next to it). The e2e tests install the PodMonitor CRD into the local
# control plane, so the apiserver validates the PodMonitors the operator renders against the real
# schema; the chart test does the same with the chart's ServiceMonitor and PrometheusRule.
# A no-op when that version is cached (~2 s and a 4 MB module zip cold). Nothing is built.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/lib.sh
. "$root/hack/lib.sh"

# Pinned: bump deliberately (the module proxy serves v0.85.0 of the repository's root module).
module=github.com/prometheus-operator/prometheus-operator
version=v0.85.0
file=monitoring.coreos.com_podmonitors.yaml
files=("$file" monitoring.coreos.com_servicemonitors.yaml monitoring.coreos.com_prometheusrules.yaml)

dest="$(cache_root)/prometheus-operator-crds-$version"
cached=1
for f in "${files[@]}"; do [[ -f "$dest/$f" ]] || cached=0; done
if [[ $cached == 0 ]]; then
  log "downloading $module@$version (for its PodMonitor, ServiceMonitor and PrometheusRule CRDs)"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  # Outside any module: `go mod download` of a module@version needs no go.mod.
  dir=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "$module@$version" |
    python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(d["Error"]) if d.get("Error") else print(d["Dir"])')
  mkdir -p "$dest.partial"
  for f in "${files[@]}"; do
    cp "$dir/example/prometheus-operator-crd/$f" "$dest.partial/"
    chmod u+w "$dest.partial/$f"
  done
  rm -rf "$dest"
  mv "$dest.partial" "$dest"
fi
echo "$dest/$file"
