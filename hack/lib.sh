# Shared shell helpers for hack/*.sh (sourced, not run).
log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

# Cache root outside the checkout; override with GLM_OPERATOR_CACHE.
cache_root() { echo "${GLM_OPERATOR_CACHE:-$HOME/.cache/glm-operator}"; }

# The tools bin directory is keyed by the pinned go.mod files, so a version bump rebuilds.
tools_bin_dir() {
  local key
  key=$(cat "$root"/tools/*/go.mod | sha256sum | cut -c1-12)
  echo "$(cache_root)/tools-$key/bin"
}
