#!/usr/bin/env bash
# The Debian packages a make target needs, installed when missing; a no-op when all are present.
#
#   hack/system-packages.sh demo          make, openssl (the local cluster's service-account key)
#   hack/system-packages.sh integration   + haproxy (the gateway's config check), chromium (the plan
#                                           page's browser test: headless, loopback and file:// only)
#   hack/system-packages.sh test          + podman, runc, mmdebstrap (the operator image's e2e test:
#                                           its base image made locally, run as the chart runs it)
#
# As root it runs apt-get; otherwise it stops at once with one line naming the command to run.
# Nothing else here is a system package: Go comes with the machine, the Kubernetes tools are built
# from Go modules, Prometheus is unpacked from its .deb into the cache (hack/prometheus.sh), and the
# Argo CD health check's Lua runs in lupa from PyPI.
# GLM_ASSUME_MISSING="pkg ..." treats those packages as missing (to see what a fresh machine gets).
set -euo pipefail

set_name=${1:-test}
case "$set_name" in
  demo) wanted=(make openssl) ;;
  integration) wanted=(make openssl haproxy chromium) ;;
  test | e2e) wanted=(make openssl haproxy chromium podman runc mmdebstrap) ;;
  *) echo "usage: $0 demo|integration|test" >&2; exit 2 ;;
esac

# Each package's command; haproxy and runc live in /usr/sbin, which a user's PATH often lacks.
present() {
  case " ${GLM_ASSUME_MISSING:-} " in *" $1 "*) return 1 ;; esac
  command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ]
}

missing=()
for pkg in "${wanted[@]}"; do
  present "$pkg" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "missing Debian packages for 'make $set_name': run: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing Debian packages: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}"
