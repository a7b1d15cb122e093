#!/usr/bin/env bash
# Print the bin directory of the cached tool binaries (without building anything).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/lib.sh
. "$root/hack/lib.sh"
tools_bin_dir
