#!/usr/bin/env bash
# Install the vLLM release the default image runs (vllm==$VLLM_VERSION, from PyPI) into its own
# virtualenv in the cache dir, outside the checkout, and print that venv's python on stdout.
# The contract test (tests/contract/test_vllm_contract.py) imports vLLM from there. A no-op when
# already installed. About 10 GB (torch and the CUDA wheels come with it; no GPU is needed to
# import it). Set VLLM_PYTHON to use an interpreter of your own that has vLLM installed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/lib.sh
. "$root/hack/lib.sh"

if [[ -n "${VLLM_PYTHON:-}" ]]; then
  echo "$VLLM_PYTHON"
  exit 0
fi

# Keep in step with DEFAULT_VLLM_VERSION in operator/glm_operator/vllm_image.py (a unit test checks).
VLLM_VERSION=0.33.0
py=${VLLM_BASE_PYTHON:-python3.11}
pyver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
key=$(printf 'vllm==%s py%s\n' "$VLLM_VERSION" "$pyver" | sha256sum | cut -c1-12)
dest="$(cache_root)/vllm-$VLLM_VERSION-$key"

if [[ ! -f "$dest/.installed" ]]; then
  t0=$SECONDS
  log "installing vllm==$VLLM_VERSION into $dest (about 10 GB, several minutes cold)"
  rm -rf "$dest.partial"
  "$py" -m venv "$dest.partial"
  "$dest.partial/bin/pip" install -q --upgrade pip >&2
  nice -n 10 "$dest.partial/bin/pip" install -q --no-cache-dir "vllm==$VLLM_VERSION" >&2
  # A venv's scripts hold its absolute path: build it in place under the final name.
  rm -rf "$dest"
  mv "$dest.partial" "$dest"
  "$py" -m venv --upgrade "$dest" >&2
  for s in "$dest"/bin/*; do
    [[ -f "$s" && ! -L "$s" ]] && sed -i "1s|$dest.partial|$dest|" "$s"
  done
  touch "$dest/.installed"
  log "installed vllm==$VLLM_VERSION in $((SECONDS - t0))s"
fi
echo "$dest/bin/python"
