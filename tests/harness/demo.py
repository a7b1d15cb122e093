"""``make demo``: the main job on a local default.

Starts the local control plane with simulated GPU nodes and the LeaderWorkerSet controller,
installs the CRD and the chart's RBAC, runs the operator under its own ServiceAccount (in the
background, logs in .cluster/operator/), applies the samples (with the Secrets and volume claims
they name), waits for them to settle and prints ``kubectl get glmd`` and where each replica's
pods landed, LeaderWorkerSet groups included. ``make cluster-down`` stops everything, the
operator and the LeaderWorkerSet controller included.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from tests.harness import inference_extension
from tests.harness.cluster import LocalCluster, repo_root, stop_process_group
from tests.harness.lws import LeaderWorkerSetController
from tests.harness.operator import RunningOperator
from tests.harness.samples import create_prerequisites

NAMESPACE = "llm"
SETTLED = {"Ready", "Degraded", "Failed"}


def main() -> int:
    root = repo_root()
    local = LocalCluster()
    t0 = time.monotonic()
    local.up(nodes=[root / "tests" / "fixtures" / "gpu-cluster.yaml"])
    print(f"cluster up in {time.monotonic() - t0:.1f}s  (KUBECONFIG={local.kubeconfig})")
    t0 = time.monotonic()
    # Before the operator starts: it looks for the LeaderWorkerSet API when it starts.
    LeaderWorkerSetController(local).up()
    print(f"LeaderWorkerSet controller (lws-manager v0.9.0) ready in {time.monotonic() - t0:.1f}s")
    inference_extension.install_crd(local)  # glm-4.7-flash asks for an InferencePool
    workdir = local.state_dir / "operator"
    workdir.mkdir(parents=True, exist_ok=True)
    operator = RunningOperator(local, workdir, namespaces="", resync_seconds=30)
    operator.install()
    _stop_previous(local)
    operator.start()
    assert operator.proc is not None
    (workdir / "pid").write_text(str(operator.proc.pid))
    local.register_extra_process("glm-operator", operator.proc.pid)
    print(
        "operator running as system:serviceaccount:glm-operator-system:glm-operator",
        f"(log: {operator.log_path})",
    )
    local.kubectl("create", "namespace", NAMESPACE, check=False)
    create_prerequisites(local, NAMESPACE)  # the Secret and bound volume claim GLM-5.2 names
    local.kubectl("apply", "-n", NAMESPACE, "-f", str(root / "manifests" / "samples"))
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        items = json.loads(local.kubectl("get", "glmd", "-n", NAMESPACE, "-o", "json").stdout)["items"]
        phases = [i.get("status", {}).get("phase") for i in items]
        if items and all(p in SETTLED for p in phases):
            break
        time.sleep(1)
    print()
    print(local.kubectl("get", "glmd", "-n", NAMESPACE).stdout)
    print(local.kubectl("get", "inferencepools", "-n", NAMESPACE).stdout)
    print(_placements(local))
    for item in items:
        for cond in item.get("status", {}).get("conditions", []):
            if cond["type"] == "Degraded" and cond["status"] == "True":
                print(f"{item['metadata']['name']}: {cond['message'][:400]}")
    print()
    print(f"export KUBECONFIG={local.kubeconfig}   # explore: kubectl describe glmd -n {NAMESPACE}")
    print("stop everything with: make cluster-down")
    return 0


def _placements(local: LocalCluster) -> str:
    """One row per pod: its LeaderWorkerSet group (or "-" for a one-pod replica), role and node."""
    pods = json.loads(
        local.kubectl(
            "get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/managed-by=glm-operator", "-o", "json"
        ).stdout
    )["items"]
    nodes = json.loads(local.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    product = {
        n["metadata"]["name"]: n["metadata"]["labels"].get("nvidia.com/gpu.product", "-") for n in nodes
    }
    header = ("GLMDEPLOYMENT", "REPLICA", "ROLE", "POD", "PHASE", "NODE", "GPU PRODUCT", "GPUS", "TP", "PP")
    rows = sorted(placement_row(pod, product) for pod in pods)
    return _table([header, *rows])


def placement_row(pod: dict[str, Any], product: dict[str, str]) -> tuple[str, ...]:
    labels = pod["metadata"]["labels"]
    container = pod["spec"]["containers"][0]
    args = container.get("args", [])

    def arg(flag: str, default: str) -> str:
        return args[args.index(flag) + 1] if flag in args else default

    group = labels.get("leaderworkerset.sigs.k8s.io/group-index")
    if group is not None:
        replica = f"{labels.get('leaderworkerset.sigs.k8s.io/name', '?')}/{group}"
        index = labels.get("leaderworkerset.sigs.k8s.io/worker-index", "?")
        role = "leader" if index == "0" else f"worker {index}"
    else:
        replica, role = "-", "server"  # a Deployment pod is a whole replica by itself
    limits = container.get("resources", {}).get("limits", {})
    gpus = ",".join(f"{v}x{k.split('/')[-1]}" for k, v in limits.items() if k.startswith("nvidia.com/"))
    node = pod["spec"].get("nodeName") or "-"
    return (
        labels.get("inference.glm.dev/deployment", "?"),
        replica,
        role,
        pod["metadata"]["name"],
        pod["status"].get("phase", "?"),
        node,
        product.get(node, "-"),
        gpus,
        arg("--tensor-parallel-size", "-"),
        arg("--pipeline-parallel-size", "1"),
    )


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def _stop_previous(local: LocalCluster) -> None:
    pid_file = local.state_dir / "operator" / "pid"
    if pid_file.exists():
        stop_process_group(int(pid_file.read_text()))


if __name__ == "__main__":
    sys.exit(main())
