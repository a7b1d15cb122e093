#!/usr/bin/env bash
# Build the binaries the local cluster needs from the pinned Go modules under tools/,
# into a versioned cache outside the checkout. A second run with the cache present is a no-op.
#
#   tools/k8s   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (Kubernetes 1.34.x)
#   tools/etcd  etcd 3.6
#   tools/kwok  kwok (simulated nodes and pods)
#   tools/helm  helm v3
#   tools/sim   llm-d-inference-sim (a vLLM simulator exporting vLLM's metrics)
#
# Prints the bin directory on stdout (last line); progress goes to stderr.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/lib.sh
. "$root/hack/lib.sh"

bin=$(tools_bin_dir)
mkdir -p "$bin"
export GOFLAGS=-mod=mod CGO_ENABLED=0

k8s_ldflags() {
  local kv minor V=k8s.io/component-base/version
  kv=$(awk '$1=="k8s.io/kubernetes"{print $2}' "$root/tools/k8s/go.mod")
  minor=$(echo "$kv" | cut -d. -f2)
  echo "-s -w -X $V.gitVersion=$kv -X $V.gitMajor=1 -X $V.gitMinor=$minor -X k8s.io/client-go/pkg/version.gitVersion=$kv"
}

build() { # build <module dir> <output name> <package>
  local dir=$1 out=$2 pkg=$3 ldflags="-s -w" t0=$SECONDS
  if [ -x "$bin/$out" ]; then log "cached: $out"; return; fi
  [ "$dir" = k8s ] && ldflags=$(k8s_ldflags)
  log "building $out from tools/$dir ..."
  (cd "$root/tools/$dir" && go build -trimpath -ldflags "$ldflags" -o "$bin/.$out.tmp" "$pkg")
  mv "$bin/.$out.tmp" "$bin/$out"
  log "built $out in $((SECONDS - t0))s"
}

for c in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  build k8s "$c" "k8s.io/kubernetes/cmd/$c"
done
build etcd etcd go.etcd.io/etcd/server/v3
build kwok kwok sigs.k8s.io/kwok/cmd/kwok
# KWOK does nothing without Stage configs: take the "fast" node/pod stages from the same module.
stages=$(dirname "$bin")/kwok-stages
if [ ! -f "$stages/pod-ready.yaml" ]; then
  kdir=$(cd "$root/tools/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
  mkdir -p "$stages"
  cp "$kdir"/kustomize/stage/node/fast/node-initialize.yaml \
     "$kdir"/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
     "$kdir"/kustomize/stage/pod/fast/pod-*.yaml "$stages/"
  chmod u+w "$stages"/*.yaml
fi
build helm helm helm.sh/helm/v3/cmd/helm
build sim llm-d-inference-sim github.com/llm-d/llm-d-inference-sim/cmd/llm-d-inference-sim
echo "$bin"
