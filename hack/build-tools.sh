#!/usr/bin/env bash
# Build the binaries the local cluster needs from the pinned Go modules under tools/, each into
# its own cache directory outside the checkout (keyed by its go.mod/go.sum), two builds at a time;
# then link them into the bin directory the cluster code reads. A run with everything cached is a
# no-op.
#
#   tools/k8s   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (Kubernetes 1.34.x)
#   tools/etcd  etcd 3.6
#   tools/kwok  kwok (simulated nodes and pods)
#   tools/helm  helm v3
#   tools/lws   lws-manager (the LeaderWorkerSet controller and webhooks, v0.9.0), plus its CRDs,
#               webhook configuration and RBAC from the same module (lws-config/)
#   tools/karpenter  karpenter-kwok: Karpenter's KWOK provider (the node autoscaler of the elastic
#               GPU tests) + its CRDs. Its go.mod needs a newer Go than the machine's: that target
#               alone runs with GOTOOLCHAIN=$KARPENTER_GOTOOLCHAIN (served by the Go module proxy).
#   tools/inference-extension  epp: the Gateway API Inference Extension's endpoint picker (v1.5.0,
#               the last release with the full picker), its InferencePool CRD (crds/), and
#               extproc-pick, the tests' client of the picker's Envoy ext_proc API (in-repo source).
#
# Prints the bin directory on stdout (last line); progress goes to stderr.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/lib.sh
. "$root/hack/lib.sh"

export GOFLAGS=-mod=mod CGO_ENABLED=0
jobs=${GLM_BUILD_JOBS:-2}
KARPENTER_GOTOOLCHAIN=go1.27.3

k8s_ldflags() {
  local kv minor V=k8s.io/component-base/version
  kv=$(awk '$1=="k8s.io/kubernetes"{print $2}' "$root/tools/k8s/go.mod")
  minor=$(echo "$kv" | cut -d. -f2)
  echo "-s -w -X $V.gitVersion=$kv -X $V.gitMinor=$minor -X $V.gitMajor=1 -X k8s.io/client-go/pkg/version.gitVersion=$kv"
}

# Karpenter's manager binds its metrics and health ports on every interface (":PORT"), with no
# flag for the host. The tests bind servers to loopback only, so the build uses a copy of the
# pinned module (in the tool's cache directory) whose operator.go binds 127.0.0.1, through a
# `replace` in a copy of tools/karpenter/go.mod (-modfile; the committed go.mod is untouched).
# Also copies the module's CRDs (NodePool, NodeClaim, KWOKNodeClass) next to the binary.
module_dir() { # module_dir <tools dir> <module> [GOTOOLCHAIN]: the module's source in the module cache
  # `go list -m` prints an empty Dir for a module not downloaded yet (a cold cache), so download first.
  local dir
  dir=$(cd "$root/tools/$1" && GOTOOLCHAIN=${3:-$(go env GOTOOLCHAIN)} go mod download -json "$2" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
  [ -n "$dir" ] && [ -d "$dir" ] || { log "no source for $2 in the module cache (tools/$1)"; return 1; }
  echo "$dir"
}

karpenter_modfile() { # prints the -modfile to build with
  local tdir kdir src
  tdir=$(tool_dir karpenter)
  kdir=$(module_dir karpenter sigs.k8s.io/karpenter "$KARPENTER_GOTOOLCHAIN") || return 1
  rm -rf "$tdir/src" && mkdir -p "$tdir/build" "$tdir/crds"
  cp -r "$kdir" "$tdir/src" && chmod -R u+w "$tdir/src"
  src=$tdir/src/pkg/operator/operator.go
  grep -q 'fmt.Sprintf(":%d", options.FromContext(ctx).MetricsPort)' "$src" || { log "karpenter: bind-address patch does not apply"; return 1; }
  sed -i -e 's/fmt.Sprintf(":%d", options.FromContext(ctx).MetricsPort)/fmt.Sprintf("127.0.0.1:%d", options.FromContext(ctx).MetricsPort)/' \
         -e 's/fmt.Sprintf(":%d", options.FromContext(ctx).HealthProbePort)/fmt.Sprintf("127.0.0.1:%d", options.FromContext(ctx).HealthProbePort)/' "$src"
  cp "$root/tools/karpenter/go.mod" "$root/tools/karpenter/go.sum" "$tdir/build/"
  (cd "$tdir/build" && GOTOOLCHAIN=$KARPENTER_GOTOOLCHAIN go mod edit -modfile=go.mod -replace "sigs.k8s.io/karpenter=$tdir/src")
  cp "$tdir"/src/kwok/charts/crds/karpenter.sh_nodepools.yaml "$tdir"/src/kwok/charts/crds/karpenter.sh_nodeclaims.yaml \
     "$tdir"/src/kwok/apis/crds/karpenter.kwok.sh_kwoknodeclasses.yaml "$tdir/crds/"
  echo "$tdir/build/go.mod"
}

# The endpoint picker listens on every interface (":PORT": its ext_proc and health gRPC servers,
# its metrics and pprof), with no flag for the host. As for Karpenter, the build uses a copy of the
# pinned module whose two listen calls bind 127.0.0.1 (the only change), through a `replace` in a
# copy of tools/inference-extension/go.mod; the InferencePool CRD is copied from the same module.
# The image the operator renders for real clusters is upstream's own (api: DEFAULT_EPP_IMAGE).
inference_extension_modfile() { # prints the -modfile to build with
  local tdir gdir src
  tdir=$(tool_dir inference-extension)
  [ -f "$tdir/build/go.mod" ] && [ -f "$tdir/crds/inference.networking.k8s.io_inferencepools.yaml" ] && { echo "$tdir/build/go.mod"; return; }
  gdir=$(module_dir inference-extension sigs.k8s.io/gateway-api-inference-extension) || return 1
  rm -rf "$tdir/src" && mkdir -p "$tdir/build" "$tdir/crds"
  cp -r "$gdir" "$tdir/src" && chmod -R u+w "$tdir/src"
  src=$tdir/src/internal/runnable/grpc.go
  grep -q 'net.Listen("tcp", fmt.Sprintf(":%d", port))' "$src" || { log "epp: grpc bind-address patch does not apply"; return 1; }
  sed -i 's/net.Listen("tcp", fmt.Sprintf(":%d", port))/net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))/' "$src"
  src=$tdir/src/cmd/epp/runner/runner.go
  grep -q 'BindAddress: fmt.Sprintf(":%d", opts.MetricsPort)' "$src" || { log "epp: metrics bind-address patch does not apply"; return 1; }
  sed -i 's/BindAddress: fmt.Sprintf(":%d", opts.MetricsPort)/BindAddress: fmt.Sprintf("127.0.0.1:%d", opts.MetricsPort)/' "$src"
  cp "$root/tools/inference-extension/go.mod" "$root/tools/inference-extension/go.sum" "$tdir/build/"
  (cd "$tdir/build" && go mod edit -modfile=go.mod -replace "sigs.k8s.io/gateway-api-inference-extension=$tdir/src")
  cp "$tdir"/src/config/crd/bases/inference.networking.k8s.io_inferencepools.yaml "$tdir/crds/"
  echo "$tdir/build/go.mod"
}

build() { # build <module dir> <output name> <package>
  local dir=$1 out=$2 pkg=$3 ldflags="-s -w" t0=$SECONDS tbin ov extra=()
  tbin=$(tool_dir "$dir")/bin
  if [ -x "$tbin/$out" ]; then log "cached: $out"; return; fi
  mkdir -p "$tbin"
  [ "$dir" = k8s ] && ldflags=$(k8s_ldflags)
  [ "$dir" = lws ] && ldflags=$(lws_ldflags)
  log "building $out from tools/$dir ..."
  if [ "$dir" = karpenter ]; then
    ov=$(karpenter_modfile) || return 1
    extra=(-modfile "$ov")
    (cd "$root/tools/$dir" && GOTOOLCHAIN=$KARPENTER_GOTOOLCHAIN nice -n 10 go build -trimpath -ldflags "$ldflags" "${extra[@]}" -o "$tbin/.$out.tmp" "$pkg")
  elif [ "$dir" = inference-extension ]; then
    ov=$(inference_extension_modfile) || return 1
    (cd "$root/tools/$dir" && nice -n 10 go build -trimpath -ldflags "$ldflags" -modfile "$ov" -o "$tbin/.$out.tmp" "$pkg")
  else
    (cd "$root/tools/$dir" && go build -trimpath -ldflags "$ldflags" -o "$tbin/.$out.tmp" "$pkg")
  fi
  mv "$tbin/.$out.tmp" "$tbin/$out"
  log "built $out in $((SECONDS - t0))s"
}

lws_ldflags() {
  local v
  v=$(awk '$1=="sigs.k8s.io/lws"{print $2}' "$root/tools/lws/go.mod")
  echo "-s -w -X sigs.k8s.io/lws/pkg/version.GitVersion=$v"
}

lws_config() { # The manifests the local cluster installs beside lws-manager, from the same module.
  local cfg ldir
  cfg=$(tool_dir lws)/lws-config
  [ -f "$cfg/webhooks.yaml" ] && return
  ldir=$(module_dir lws sigs.k8s.io/lws) || return 1
  mkdir -p "$cfg.tmp"
  cp "$ldir"/config/crd/bases/*.yaml "$cfg.tmp/"
  cp "$ldir"/config/rbac/role.yaml "$cfg.tmp/rbac-role.yaml"
  cp "$ldir"/config/rbac/leader_election_role.yaml "$cfg.tmp/rbac-leader-election-role.yaml"
  cp "$ldir"/config/webhook/mutating-patch.yaml "$ldir"/config/webhook/validating-patch.yaml "$cfg.tmp/"
  cp "$ldir"/config/webhook/manifests.yaml "$cfg.tmp/webhooks.yaml"
  chmod u+w "$cfg.tmp"/*.yaml
  rm -rf "$cfg" && mv "$cfg.tmp" "$cfg"
}

kwok_stages() { # KWOK does nothing without Stage configs: the "fast" node/pod stages of the same module.
  local stages kdir
  stages=$(tool_dir kwok)/kwok-stages
  [ -f "$stages/pod-ready.yaml" ] && return
  kdir=$(module_dir kwok sigs.k8s.io/kwok) || return 1
  mkdir -p "$stages"
  cp "$kdir"/kustomize/stage/node/fast/node-initialize.yaml \
     "$kdir"/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
     "$kdir"/kustomize/stage/pod/fast/pod-*.yaml "$stages/"
  chmod u+w "$stages"/*.yaml
}

# One line per binary: <tools dir> <binary> <package>. Extra tool scripts (hack/build-*.sh) add theirs.
targets=$(cat <<'T'
k8s kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
etcd etcd go.etcd.io/etcd/server/v3
kwok kwok sigs.k8s.io/kwok/cmd/kwok
helm helm helm.sh/helm/v3/cmd/helm
karpenter karpenter-kwok sigs.k8s.io/karpenter/kwok
k8s kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
k8s kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
k8s kubectl k8s.io/kubernetes/cmd/kubectl
lws lws-manager sigs.k8s.io/lws/cmd
inference-extension epp sigs.k8s.io/gateway-api-inference-extension/cmd/epp
inference-extension extproc-pick ./extproc-pick
T
)

# k8s binaries share one module cache and build cache; run them in one lane, the rest in others.
pids=()
lane() { while read -r d o p; do [ -n "$d" ] && build "$d" "$o" "$p"; done; }
echo "$targets" | grep '^k8s ' | lane & pids+=($!)
if [ "$jobs" -gt 1 ]; then
  echo "$targets" | grep -v '^k8s ' | lane & pids+=($!)
else
  wait "${pids[0]}"; echo "$targets" | grep -v '^k8s ' | lane
fi
fail=0
for p in "${pids[@]}"; do wait "$p" || fail=1; done
[ "$fail" = 0 ] || { log "tool build failed"; exit 1; }
kwok_stages
lws_config

bin=$(tools_bin_dir)
mkdir -p "$bin"
while read -r d o _; do
  ln -sfn "$(tool_dir "$d")/bin/$o" "$bin/$o"
done <<<"$targets"
ln -sfn "$(tool_dir kwok)/kwok-stages" "$(dirname "$bin")/kwok-stages"
ln -sfn "$(tool_dir lws)/lws-config" "$(dirname "$bin")/lws-config"
ln -sfn "$(tool_dir karpenter)/crds" "$(dirname "$bin")/karpenter-crds"
ln -sfn "$(tool_dir inference-extension)/crds" "$(dirname "$bin")/inference-extension-crds"
echo "$bin"
