# Shared shell helpers for hack/*.sh (sourced, not run).
log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

# Cache root outside the checkout; override with GLM_OPERATOR_CACHE.
cache_root() { echo "${GLM_OPERATOR_CACHE:-$HOME/.cache/glm-operator}"; }

# Each tool is cached under its own key (the hash of the files of tools/<name>: its go.mod and
# go.sum, and the source of an in-repo command such as tools/inference-extension/extproc-pick), so
# bumping one tool rebuilds only that tool. Files are read in byte order: for a tool with only
# go.mod and go.sum the key is the hash of those two, as it always was.
tool_dir() { # tool_dir <name under tools/>
  local key
  key=$(cd "$root/tools/$1" 2>/dev/null && find . -type f | LC_ALL=C sort | xargs -r cat | sha256sum | cut -c1-12)
  echo "$(cache_root)/tool-$1-$key"
}

# The bin directory the cluster code reads: symlinks into the per-tool directories, keyed by
# all pinned tools together (cheap to recreate: no build happens for a tool already cached).
tools_bin_dir() {
  local key
  key=$(cat "$root"/tools/*/go.mod | sha256sum | cut -c1-12)
  echo "$(cache_root)/tools-$key/bin"
}

# podman as these machines run it: crun refuses the hybrid cgroup layout, so runc with cgroupfs.
podman_cmd() { podman --runtime runc --cgroup-manager cgroupfs "$@"; }
