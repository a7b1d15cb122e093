#!/usr/bin/env bash
# Make the operator image's base locally, without a container registry: a Debian root filesystem
# with python3 (3.11 on bookworm) and python3-venv, made by mmdebstrap from Debian's packages and
# turned into an image with `podman import`.
#
# The root filesystem is cached outside the checkout under
#   ~/.cache/glm-operator/base-<suite>-<Date of the suite's Release file, YYYYMMDDHHMMSS>/rootfs.tar
# so it is rebuilt only when Debian publishes a new state of the suite (a point release), and the
# image is re-imported from that tar only when the local image store lacks it.
#
# Prints the image reference on stdout (last line); progress goes to stderr.
#   GLM_BASE_SUITE   Debian suite (default: bookworm)
#   GLM_BASE_MIRROR  Debian mirror (default: http://deb.debian.org/debian)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/lib.sh
. "$root/hack/lib.sh"

suite=${GLM_BASE_SUITE:-bookworm}
mirror=${GLM_BASE_MIRROR:-http://deb.debian.org/debian}
packages=python3,python3-venv,ca-certificates,tzdata

# The suite's state on the mirror: the Date field of its Release file. Offline, fall back to the
# newest cached base of the suite.
snapshot=$(python3 - "$mirror/dists/$suite/Release" <<'PY' || true
import email.utils, sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=20) as resp:
    for line in resp.read(4096).decode().splitlines():
        if line.startswith("Date:"):
            print(email.utils.parsedate_to_datetime(line[5:].strip()).strftime("%Y%m%d%H%M%S"))
            break
PY
)
if [ -z "$snapshot" ]; then
  latest=$(ls -d "$(cache_root)/base-$suite-"* 2>/dev/null | sort | tail -1 || true)
  [ -n "$latest" ] || { log "cannot read $mirror/dists/$suite/Release and no cached base"; exit 1; }
  snapshot=${latest##*-}
  log "mirror unreachable: using the cached base of $snapshot"
fi
options="no-recommends minbase"
key=$(echo "$packages $options" | sha256sum | cut -c1-6)
dir=$(cache_root)/base-$suite-$key-$snapshot
image=localhost/glm-operator-base:$suite-$key-$snapshot

if ! podman_cmd image exists "$image"; then
  if [ ! -f "$dir/rootfs.tar" ]; then
    command -v mmdebstrap >/dev/null || { log "mmdebstrap missing: apt-get install mmdebstrap"; exit 1; }
    mkdir -p "$dir"
    t0=$SECONDS
    log "mmdebstrap $suite ($snapshot) with $packages ..."
    # No recommended packages (they bring perl); documentation, man pages and apt's package lists
    # are of no use in the image.
    mmdebstrap --variant=minbase --include="$packages" --aptopt='APT::Install-Recommends "false"' \
      --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
      --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
      --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
      "$suite" "$dir/.rootfs.tar" "$mirror" >&2
    mv "$dir/.rootfs.tar" "$dir/rootfs.tar"
    # Older states of the same suite and package set are superseded.
    for stale in "$(cache_root)/base-$suite-$key-"*; do
      [ "$stale" = "$dir" ] || rm -rf "$stale"
    done
    log "root filesystem in $((SECONDS - t0))s: $(du -h "$dir/rootfs.tar" | cut -f1)"
  fi
  podman_cmd import --quiet \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python3"]' \
    "$dir/rootfs.tar" "$image" >&2
  log "imported $image"
fi
echo "$image"
