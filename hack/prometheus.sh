#!/usr/bin/env bash
# Unpack Debian's `prometheus` package into the cache dir (no system-wide install) and print the
# binary path. A no-op when that version is already unpacked. Set PROMETHEUS_BIN to skip all this
# and use a binary of your own.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/lib.sh
. "$root/hack/lib.sh"

if [[ -n "${PROMETHEUS_BIN:-}" ]]; then
  echo "$PROMETHEUS_BIN"
  exit 0
fi

# Fast path: any already unpacked version (newest first), without touching apt.
for bin in $(ls -d "$(cache_root)"/prometheus-*/usr/bin/prometheus 2>/dev/null | sort -rV); do
  if [[ -x "$bin" ]]; then
    echo "$bin"
    exit 0
  fi
done

candidate() { apt-cache policy prometheus 2>/dev/null | awk '/Candidate:/ {print $2}'; }
version=$(candidate)
if [[ -z "$version" || "$version" == "(none)" ]]; then
  log "apt has no candidate for prometheus; running apt-get update"
  apt-get update -qq >&2
  version=$(candidate)
fi
if [[ -z "$version" || "$version" == "(none)" ]]; then
  log "no 'prometheus' package in the configured apt sources"
  exit 1
fi

dest="$(cache_root)/prometheus-${version//:/_}"
if [[ ! -x "$dest/usr/bin/prometheus" ]]; then
  work=$(mktemp -d)
  chmod 755 "$work" # apt downloads as user _apt when it can
  trap 'rm -rf "$work"' EXIT
  log "downloading prometheus $version"
  (cd "$work" && apt-get download -qq prometheus >&2)
  mkdir -p "$dest.partial"
  dpkg-deb -x "$work"/prometheus_*.deb "$dest.partial"
  rm -rf "$dest"
  mv "$dest.partial" "$dest"
fi
echo "$dest/usr/bin/prometheus"
