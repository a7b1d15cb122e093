#!/usr/bin/env bash
# Build or save the operator image (Containerfile).
#
#   hack/image.sh build   build and tag $GLM_IMAGE (default ghcr.io/glm-operator/glm-operator:<version>,
#                         the chart's default image) and localhost/glm-operator:src-<source hash>
#   hack/image.sh save    also write dist/glm-operator-<version>.tar (for `kind load image-archive`,
#                         `minikube image load`, `ctr images import`)
#
# With podman (preferred when present) and mmdebstrap, the base is made locally
# (hack/base-image.sh); otherwise the Containerfile's default public base is pulled. GLM_BASE_IMAGE
# overrides both. The source-hash tag makes a build of unchanged sources a no-op. pip in the build
# trusts $GLM_BUILD_CA_BUNDLE (default: $PIP_CERT, else the system's CA bundle), passed as a secret.
# Prints the image reference on stdout (last line); progress goes to stderr.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/lib.sh
. "$root/hack/lib.sh"
cd "$root"

version=$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
image=${GLM_IMAGE:-ghcr.io/glm-operator/glm-operator:$version}
revision=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)

if command -v podman >/dev/null; then
  engine=podman_cmd
  build_flags=(--isolation=chroot --layers)
elif command -v docker >/dev/null; then
  engine=docker
  build_flags=()
else
  log "neither podman nor docker is installed (Debian: apt-get install podman runc)"; exit 1
fi

base=${GLM_BASE_IMAGE:-}
if [ -z "$base" ] && [ "$engine" = podman_cmd ] && command -v mmdebstrap >/dev/null; then
  base=$(bash "$root/hack/base-image.sh")
fi

# Everything the build context holds (see .dockerignore), plus the base it builds on.
context_files() {
  echo "$base"
  find Containerfile .dockerignore pyproject.toml README.md operator -type f \
    -not -path '*/__pycache__/*' -not -path '*.egg-info/*' -print0 | sort -z | xargs -0 sha256sum
}
# pip in the build reaches PyPI through whatever TLS interception this machine trusts.
ca_bundle=${GLM_BUILD_CA_BUNDLE:-${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}}
secret=()
[ -s "$ca_bundle" ] && secret=(--secret "id=ca-bundle,src=$ca_bundle")
source_hash=$(context_files | sha256sum | cut -c1-12)
cached=localhost/glm-operator:src-$source_hash

if $engine image inspect "$cached" >/dev/null 2>&1; then
  log "cached: $cached (sources unchanged)"
else
  t0=$SECONDS
  log "building $image from ${base:-the default base of the Containerfile} ..."
  $engine build "${build_flags[@]}" "${secret[@]}" -f Containerfile \
    ${base:+--build-arg "BASE_IMAGE=$base"} \
    --build-arg "VERSION=$version" --build-arg "REVISION=$revision" \
    -t "$cached" . >&2
  log "built in $((SECONDS - t0))s"
  # Keep the image store small: the three newest source-hash builds, no dangling layers.
  $engine images --filter reference=localhost/glm-operator --format '{{.Tag}}' | grep '^src-' | tail -n +4 |
    while read -r old; do $engine rmi "localhost/glm-operator:$old" >/dev/null 2>&1 || true; done
  $engine image prune --force >/dev/null 2>&1 || true
fi
$engine tag "$cached" "$image"
log "$image: $($engine image inspect --format '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1/1e6}')"

if [ "${1:-build}" = save ]; then
  mkdir -p dist
  archive=dist/glm-operator-$version.tar
  rm -f "$archive"
  # docker-archive: the format `kind load image-archive`, `minikube image load` and
  # `ctr images import` all take, with the image's name inside.
  $engine save --format docker-archive -o "$archive" "$image" 2>/dev/null \
    || $engine save -o "$archive" "$image"
  log "wrote $archive ($(du -h "$archive" | cut -f1))"
fi
echo "$image"
