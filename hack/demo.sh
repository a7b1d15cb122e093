#!/usr/bin/env bash
# Main job, local default: start the simulated GPU cluster and show what the operator will see.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
.venv/bin/glm-operator cluster up
export KUBECONFIG=$root/.cluster/kubeconfig
kubectl=$(bash hack/tools-bin.sh)/kubectl
echo
$kubectl get nodes -L nvidia.com/gpu.product,nvidia.com/gpu.count,nvidia.com/gpu.memory
echo
echo "KUBECONFIG=$KUBECONFIG ; stop with: make cluster-down"
