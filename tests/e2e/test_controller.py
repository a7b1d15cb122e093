"""The operator on the real control plane with simulated heterogeneous GPU nodes.

The operator runs as a subprocess with the chart's ServiceAccount token (not admin) and serves
namespaces matching ``ctl-*``; every test gets its own such namespace.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness.cluster import repo_root, wait_for
from tests.harness.samples import create_prerequisites, volume_selector

from .conftest import NODES, E2ECluster, RunningOperator, delete_namespace

pytestmark = pytest.mark.e2e
SAMPLES = repo_root() / "manifests" / "samples"


def get(cluster: E2ECluster, ns: str, kind: str, name: str | None = None, selector: str | None = None) -> Any:
    args = ["get", kind, "-n", ns, "-o", "json"]
    if name:
        args.insert(2, name)
    if selector:
        args += ["-l", selector]
    return json.loads(cluster.kubectl(*args).stdout)


def glmd(cluster: E2ECluster, ns: str, name: str) -> dict[str, Any]:
    return dict(get(cluster, ns, "glmd", name))


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    for c in obj.get("status", {}).get("conditions", []):
        if c["type"] == type_:
            return dict(c)
    return {}


def phase_is(cluster: E2ECluster, ns: str, name: str, phase: str) -> Callable[[], dict[str, Any] | None]:
    def check() -> dict[str, Any] | None:
        obj = glmd(cluster, ns, name)
        status = obj.get("status", {})
        ok = (
            status.get("phase") == phase and status.get("observedGeneration") == obj["metadata"]["generation"]
        )
        return obj if ok else None

    return check


def children(cluster: E2ECluster, ns: str, name: str) -> list[dict[str, Any]]:
    """The vLLM Deployments of a GLMDeployment (not its endpoint picker's: spec.inferencePool)."""
    sel = f"inference.glm.dev/deployment={name},app.kubernetes.io/component=inference"
    return list(get(cluster, ns, "deployments", selector=sel)["items"])


def arg_value(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def vllm_args(deployment: dict[str, Any]) -> list[str]:
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return list(container.get("command", [])) + list(container.get("args", []))


def apply(cluster: E2ECluster, ns: str, doc: dict[str, Any] | Path) -> None:
    if isinstance(doc, Path):
        cluster.kubectl("apply", "-n", ns, "-f", str(doc))
    else:
        cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(doc))


def manifest(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "inference.glm.dev/v1alpha1",
        "kind": "GLMDeployment",
        "metadata": {"name": name},
        "spec": spec,
    }


# vLLM >= 0.20 counts its CUDA graphs (0.71 GiB for GLM-4-9B) in the KV budget, so at the default
# 0.9 GLM-4-9B holds 0.26 of an 8k sequence on one L4 and needs two; 0.95 gives back the headroom the
# graphs no longer need outside the budget (what vLLM's start-up log advises): 3.78 sequences on one L4.
ONE_L4 = {"products": ["L4"], "memoryUtilization": 0.95}


def small(name: str, **spec: Any) -> dict[str, Any]:
    """GLM-4-9B on one L4 at an 8k context: the cheapest GLMDeployment the fixture cluster holds."""
    spec = {
        "model": {"id": "zai-org/glm-4-9b-chat"},
        "contextLength": 8192,
        **spec,
        "gpu": {**ONE_L4, **spec.get("gpu", {})},
    }
    return manifest(name, **spec)


def node_products(cluster: E2ECluster) -> dict[str, str]:
    nodes = json.loads(cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    return {n["metadata"]["name"]: n["metadata"]["labels"].get("nvidia.com/gpu.product", "") for n in nodes}


def test_samples_run_on_the_planned_gpu_types_with_the_planned_args(
    cluster: E2ECluster, operator: RunningOperator, ns: str
) -> None:
    # The Secret and the bound model-cache claim that the GLM-5.2 sample names.
    create_prerequisites(cluster.local, ns)
    try:
        for sample in sorted(SAMPLES.glob("*.yaml")):
            apply(cluster, ns, sample)
        check_samples(cluster, ns)
    finally:
        cluster.kubectl("delete", "pv", "-l", volume_selector(ns), "--wait=false", check=False)


def check_samples(cluster: E2ECluster, ns: str) -> None:
    products = node_products(cluster)
    # GLM-5.2 and GLM-5.3 in FP8 fit one 8-GPU H200 / B200 node, served with data-parallel attention and
    # expert parallelism (8 ranks of TP 1: the shape their ranking puts first); GLM-5.1 (H100 only) runs
    # as a LeaderWorkerSet group over two H100 nodes (tests/e2e/test_leaderworkerset.py goes further).
    single_node = {"glm-4-5-air", "glm-4-7-flash", "glm-5-2", "glm-5-3", "glm-5-3-flash"}
    expected_product = {"glm-5-2": "NVIDIA-H200", "glm-5-3": "NVIDIA-B200"}
    for name in sorted(single_node):
        obj = wait_for(phase_is(cluster, ns, name, "Ready"), 90, f"{name} Ready")
        variants = [v for v in obj["status"]["plan"]["variants"] if v["replicas"] > 0]
        assert variants, obj["status"]
        if name in expected_product:
            assert [v["gpuProduct"] for v in variants] == [expected_product[name]]
            v0 = variants[0]
            assert (v0["pipelineParallelSize"], v0["gpusPerReplica"], v0["nodesPerReplica"]) == (1, 8, 1)
            assert v0["tensorParallelSize"] * v0.get("dataParallelSize", 1) == 8
        deployments = {
            d["metadata"]["labels"]["inference.glm.dev/gpu-product"]: d for d in children(cluster, ns, name)
        }
        assert set(deployments) == {v["gpuProduct"] for v in variants}
        spec = obj["spec"]
        for v in variants:
            dep = deployments[v["gpuProduct"]]
            args = vllm_args(dep)
            assert arg_value(args, "--tensor-parallel-size") == str(v["tensorParallelSize"])
            if v.get("dataParallelSize", 1) > 1:  # data-parallel attention runs with expert parallelism
                assert arg_value(args, "--data-parallel-size") == str(v["dataParallelSize"])
                assert "--enable-expert-parallel" in args
            assert arg_value(args, "--max-model-len") == str(spec["contextLength"])
            assert arg_value(args, "--served-model-name") == obj["status"]["model"]
            assert arg_value(args, "--max-num-seqs") == str(v["maxNumSeqs"])
            assert arg_value(args, "--gpu-memory-utilization") is not None
            assert dep["spec"]["replicas"] == v["replicas"]
            pods = get(cluster, ns, "pods", selector=f"inference.glm.dev/deployment={name}")["items"]
            pods = [
                p
                for p in pods
                if p["metadata"]["labels"].get("inference.glm.dev/gpu-product") == v["gpuProduct"]
            ]
            assert len(pods) == v["replicas"]
            for pod in pods:
                node = pod["spec"]["nodeName"]
                assert products[node] == v["gpuProduct"], f"{pod['metadata']['name']} on {node}"
                limits = pod["spec"]["containers"][0]["resources"]["limits"]
                assert limits["nvidia.com/gpu"] == str(v["gpusPerReplica"])
    obj = wait_for(phase_is(cluster, ns, "glm-5-1", "Ready"), 120, "glm-5-1 Ready")
    (variant,) = [v for v in obj["status"]["plan"]["variants"] if v["replicas"] > 0]
    assert (variant["tensorParallelSize"], variant["pipelineParallelSize"], variant["nodesPerReplica"]) == (
        8,
        2,
        2,
    )
    assert not children(cluster, ns, "glm-5-1")  # no Deployment: a LeaderWorkerSet
    (lws,) = get(cluster, ns, "leaderworkersets", selector="inference.glm.dev/deployment=glm-5-1")["items"]
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    pods = get(cluster, ns, "pods", selector="inference.glm.dev/deployment=glm-5-1")["items"]
    assert len({p["spec"]["nodeName"] for p in pods}) == 2
    assert {products[p["spec"]["nodeName"]] for p in pods} == {"NVIDIA-H100-80GB-HBM3"}
    # One Service per GLMDeployment over all its variants (and, for the sample with
    # spec.inferencePool, its endpoint picker's).
    services = get(cluster, ns, "services")["items"]
    ours = {
        s["metadata"]["name"]
        for s in services
        if s["metadata"].get("labels", {}).get("app.kubernetes.io/managed-by") == "glm-operator"
    }
    assert ours == single_node | {"glm-5-1", "glm-4-7-flash-epp"}
    # And one PodDisruptionBudget (maxUnavailable 1) over the same serving pods.
    pdbs = get(cluster, ns, "poddisruptionbudgets")["items"]
    assert {p["metadata"]["name"] for p in pdbs} == single_node | {"glm-5-1"}
    assert all(p["spec"]["maxUnavailable"] == 1 for p in pdbs)


def test_reapply_changes_nothing_and_a_spec_change_rolls(
    cluster: E2ECluster, operator: RunningOperator, ns: str
) -> None:
    doc = manifest(
        "flash", model={"id": "zai-org/GLM-4.7-Flash"}, contextLength=65536, gpu={"products": ["L4"]}
    )
    apply(cluster, ns, doc)
    wait_for(phase_is(cluster, ns, "flash", "Ready"), 60, "Ready")
    (dep,) = children(cluster, ns, "flash")
    svc = get(cluster, ns, "service", "flash")
    before = (dep["metadata"]["resourceVersion"], svc["metadata"]["resourceVersion"])
    apply(cluster, ns, doc)  # same spec again: no new generation, no write to any child
    time.sleep(5)  # the re-apply's watch events (none: same generation) had time to be handled
    (dep,) = children(cluster, ns, "flash")
    svc = get(cluster, ns, "service", "flash")
    assert (dep["metadata"]["resourceVersion"], svc["metadata"]["resourceVersion"]) == before
    old_hash = dep["spec"]["template"]["metadata"]["labels"]["inference.glm.dev/spec-hash"]
    old_pods = {
        p["metadata"]["name"]
        for p in get(cluster, ns, "pods", selector="inference.glm.dev/deployment=flash")["items"]
    }

    apply(cluster, ns, {**doc, "spec": {**doc["spec"], "contextLength": 32768}})
    obj = wait_for(phase_is(cluster, ns, "flash", "Ready"), 60, "Ready after change")
    assert obj["metadata"]["generation"] == 2
    (dep,) = children(cluster, ns, "flash")
    assert arg_value(vllm_args(dep), "--max-model-len") == "32768"
    assert dep["spec"]["template"]["metadata"]["labels"]["inference.glm.dev/spec-hash"] != old_hash

    def rolled() -> bool:
        pods = get(cluster, ns, "pods", selector="inference.glm.dev/deployment=flash")["items"]
        names = {p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")}
        return bool(names) and not names & old_pods

    wait_for(rolled, 60, "pods replaced")


def test_deleting_the_glmdeployment_removes_every_child(
    cluster: E2ECluster, operator: RunningOperator, ns: str
) -> None:
    apply(
        cluster,
        ns,
        manifest(
            "gone", model={"id": "zai-org/GLM-4.7-Flash"}, contextLength=32768, gpu={"products": ["L4"]}
        ),
    )
    wait_for(phase_is(cluster, ns, "gone", "Ready"), 60, "Ready")
    assert children(cluster, ns, "gone")
    cluster.kubectl("delete", "glmd", "gone", "-n", ns, "--wait=true", "--timeout=30s")

    def all_gone() -> bool:
        sel = "inference.glm.dev/deployment=gone"
        deps = get(cluster, ns, "deployments", selector=sel)["items"]
        svcs = [s for s in get(cluster, ns, "services")["items"] if s["metadata"]["name"] == "gone"]
        pods = get(cluster, ns, "pods", selector=sel)["items"]
        return not deps and not svcs and not pods

    wait_for(all_gone, 60, "children garbage-collected")


def test_a_model_no_gpu_can_hold_is_rejected_and_nothing_is_created(
    cluster: E2ECluster, operator: RunningOperator, ns: str
) -> None:
    apply(
        cluster,
        ns,
        manifest(
            "toobig",
            model={"id": "zai-org/GLM-4.6"},
            quantization="bf16",
            contextLength=131072,
            gpu={"products": ["L4"]},
        ),
    )

    def planned_false() -> dict[str, Any] | None:
        obj = glmd(cluster, ns, "toobig")
        return obj if condition(obj, "Planned").get("status") == "False" else None

    obj = wait_for(planned_false, 60, "Planned=False")
    planned = condition(obj, "Planned")
    assert "NVIDIA-L4" in planned["message"] or "L4" in planned["message"]
    assert obj["status"]["phase"] == "Failed"
    assert obj["status"]["plan"]["rejected"], obj["status"]
    time.sleep(3)
    assert not children(cluster, ns, "toobig")
    events = get(cluster, ns, "events")["items"]
    assert any(e["involvedObject"]["name"] == "toobig" and e["type"] == "Warning" for e in events)


def test_gpu_shortage_leaves_the_overflow_pending_and_says_so(
    cluster: E2ECluster, operator: RunningOperator, ns: str
) -> None:
    # 3 L4 nodes x 4 GPUs; GLM-4-9B fits one L4, so 14 replicas leave 2 without a GPU.
    apply(
        cluster,
        ns,
        small("many", replicas=14),
    )

    def degraded() -> dict[str, Any] | None:
        # Degraded may be written before the 12 placed pods are Ready; their readiness must follow
        # through the pod watch (no resync in e2e).
        obj = glmd(cluster, ns, "many")
        if condition(obj, "Degraded").get("reason") != "InsufficientGPU":
            return None
        return obj if obj["status"].get("readyReplicas") == 12 else None

    obj = wait_for(degraded, 120, "Degraded InsufficientGPU with 12 replicas Ready")
    assert obj["status"]["phase"] == "Degraded"
    assert "short of GPUs" in obj["status"]["plan"]["summary"]
    pods = get(cluster, ns, "pods", selector="inference.glm.dev/deployment=many")["items"]
    pending = [p for p in pods if p["status"]["phase"] == "Pending"]
    assert len(pending) == 2
    events = get(cluster, ns, "events")["items"]
    assert any(e["reason"] == "InsufficientGPU" and e["involvedObject"]["name"] == "many" for e in events)


def test_removing_a_gpu_node_replans(cluster: E2ECluster, operator: RunningOperator, ns: str) -> None:
    apply(
        cluster,
        ns,
        manifest(
            "air",
            model={"id": "zai-org/GLM-4.5-Air"},
            contextLength=32768,
            gpu={"products": ["A100-80GB"]},
            replicas=4,
        ),
    )
    obj = wait_for(phase_is(cluster, ns, "air", "Ready"), 90, "Ready")
    (variant,) = [v for v in obj["status"]["plan"]["variants"] if v["replicas"] > 0]
    assert variant["replicas"] == 4 and variant["tensorParallelSize"] == 4
    try:
        cluster.kubectl("delete", "node", "a100-sxm-1", "--wait=true")

        def replanned() -> dict[str, Any] | None:
            o = glmd(cluster, ns, "air")
            return o if "short of GPUs" in o["status"].get("plan", {}).get("summary", "") else None

        obj = wait_for(replanned, 60, "re-plan after node removal")
        assert "2 replica(s) short of GPUs" in obj["status"]["plan"]["summary"]
    finally:
        cluster.local.apply_nodes([NODES])

    def recovered() -> dict[str, Any] | None:
        o = glmd(cluster, ns, "air")
        return o if "short" not in o["status"].get("plan", {}).get("summary", "x") else None

    wait_for(recovered, 60, "re-plan after the node came back")


def normalized_children(cluster: E2ECluster, ns: str) -> list[tuple[str, str, int, tuple[str, ...]]]:
    deps = get(cluster, ns, "deployments")["items"]
    out = [
        (
            d["metadata"]["name"],
            d["metadata"]["ownerReferences"][0]["name"],
            d["spec"]["replicas"],
            tuple(vllm_args(d)),
        )
        for d in deps
    ]
    svcs = get(cluster, ns, "services")["items"]
    out += [(s["metadata"]["name"], s["metadata"]["ownerReferences"][0]["name"], 0, ()) for s in svcs]
    return sorted(out)


def test_killing_the_operator_mid_reconcile_ten_times_converges_to_the_same_objects(
    cluster: E2ECluster, operator: RunningOperator, ns: str
) -> None:
    specs = [small(f"m{i}", replicas=1) for i in range(3)]
    for doc in specs:
        apply(cluster, ns, doc)
    for i in range(3):
        wait_for(phase_is(cluster, ns, f"m{i}", "Ready"), 60, f"m{i} Ready")
    undisturbed = normalized_children(cluster, ns)
    for i in range(3):
        cluster.kubectl("delete", "glmd", f"m{i}", "-n", ns)
    wait_for(lambda: not get(cluster, ns, "deployments")["items"], 60, "children gone")

    operator.stop()
    rng = random.Random(5)
    try:
        for doc in specs:
            apply(cluster, ns, doc)
        for _ in range(10):
            operator.start()
            time.sleep(rng.uniform(1.5, 4.0))  # start-up takes ~1.5 s; kill while reconciling
            operator.stop(sig=9)
    finally:
        operator.start()
    for i in range(3):
        wait_for(phase_is(cluster, ns, f"m{i}", "Ready"), 90, f"m{i} Ready after kills")
    assert normalized_children(cluster, ns) == undisturbed
    # No duplicate ReplicaSets or pods beyond the wanted replicas.
    pods = get(cluster, ns, "pods")["items"]
    assert len([p for p in pods if not p["metadata"].get("deletionTimestamp")]) == 3


def reconciles(metrics_port: int) -> float:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("glm_operator_reconciles_total{")
    )


def test_two_replicas_never_both_act_and_the_standby_takes_over(
    cluster: E2ECluster, operator: RunningOperator, ns: str, tmp_path: Path
) -> None:
    from tests.harness.cluster import free_port

    operator.stop()
    first = RunningOperator(cluster.local, tmp_path / "a")
    second = RunningOperator(cluster.local, tmp_path / "b")
    ports = free_port(), free_port()
    try:
        for op in (first, second):
            op.workdir.mkdir()
            op.install()
        first.start("--metrics-port", str(ports[0]), "--metrics-host", "127.0.0.1")
        wait_for(lambda: "became leader" in first.log_tail(), 30, "first replica leads")
        second.start("--metrics-port", str(ports[1]), "--metrics-host", "127.0.0.1")
        wait_for(lambda: "started: " in second.log_tail(20000), 30, "second replica up")

        doc = small("lead")
        apply(cluster, ns, doc)
        wait_for(phase_is(cluster, ns, "lead", "Ready"), 60, "Ready under the first replica")
        time.sleep(5)  # the standby has seen every event by now (and reconciled none of them)
        assert reconciles(ports[0]) > 0
        assert reconciles(ports[1]) == 0, "the standby reconciled while another replica held the lease"

        first.stop(sig=9)  # no graceful release: the standby must wait for the lease to expire
        apply(cluster, ns, {**doc, "metadata": {"name": "after"}})
        wait_for(phase_is(cluster, ns, "after", "Ready"), 60, "Ready under the second replica")
        assert "became leader" in second.log_tail(20000)
        assert reconciles(ports[1]) > 0
    finally:
        first.stop()
        second.stop()
        operator.start()


def test_a_vllm_crash_becomes_a_degraded_reason_with_the_fix(
    cluster: E2ECluster, operator: RunningOperator, ns: str
) -> None:
    """KWOK runs no container, so the crash vLLM prints is written into the pod status by hand,
    exactly where the kubelet would put it (lastState.terminated.message, CrashLoopBackOff)."""
    apply(
        cluster,
        ns,
        small("crash", contextLength=65536),
    )
    wait_for(phase_is(cluster, ns, "crash", "Ready"), 60, "Ready")
    (pod,) = get(cluster, ns, "pods", selector="inference.glm.dev/deployment=crash")["items"]
    message = (
        "ValueError: The model's max seq len (65536) is larger than the maximum number of tokens that can "
        "be stored in KV cache (53376). Try increasing `gpu_memory_utilization` or decreasing "
        "`max_model_len` when initializing the engine."
    )
    container = pod["spec"]["containers"][0]
    status = {
        "status": {
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
                {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady"},
                {"type": "PodScheduled", "status": "True"},
                {"type": "Initialized", "status": "True"},
            ],
            "containerStatuses": [
                {
                    "name": container["name"],
                    "image": container["image"],
                    "imageID": "",
                    "ready": False,
                    "started": False,
                    "restartCount": 4,
                    "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 1m20s"}},
                    "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "message": message}},
                }
            ],
        }
    }
    cluster.kubectl(
        "patch",
        "pod",
        pod["metadata"]["name"],
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(status),
    )

    def degraded() -> dict[str, Any] | None:
        obj = glmd(cluster, ns, "crash")
        return obj if condition(obj, "Degraded").get("status") == "True" else None

    obj = wait_for(degraded, 60, "Degraded")
    cond = condition(obj, "Degraded")
    assert cond["reason"] == "ContextTooLong"
    assert "53376" in cond["message"] and "contextLength" in cond["message"]
    assert obj["status"]["phase"] in ("Degraded", "Failed")
    events = get(cluster, ns, "events")["items"]
    assert any(e["reason"] == "ContextTooLong" and e["involvedObject"]["name"] == "crash" for e in events)


def test_health_and_metrics_endpoints(cluster: E2ECluster, operator: RunningOperator, ns: str) -> None:
    import urllib.request

    from tests.harness.cluster import free_port

    health, metrics_port = free_port(), free_port()
    operator.stop()
    try:
        operator.start(
            "--liveness",
            f"http://127.0.0.1:{health}/healthz",
            "--metrics-port",
            str(metrics_port),
            "--metrics-host",
            "127.0.0.1",
        )

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{health}/healthz", timeout=2) as resp:
                    return resp.status == 200
            except OSError:
                return False

        wait_for(healthy, 30, "/healthz 200")
        apply(
            cluster,
            ns,
            small("probe"),
        )
        wait_for(phase_is(cluster, ns, "probe", "Ready"), 60, "Ready")
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        assert 'glm_operator_planned_replicas{gpu_product="NVIDIA-L4",name="probe"' in text
        assert "glm_operator_reconcile_duration_seconds_count" in text
        for series in ("glm_operator_queue_wait_seconds_count", 'glm_operator_reconciles_total{result="ok"}'):
            counts = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(series)]
            assert counts and counts[0] >= 1, f"no {series} in /metrics"
        assert reconciles(metrics_port) > 0
    finally:
        operator.stop()
        operator.start()


def test_a_deleted_namespace_leaves_no_gpus_held_and_no_glmdeployment_behind(
    cluster: E2ECluster, operator: RunningOperator, ns: str
) -> None:
    """kopf stops its watches in a namespace matched by a pattern (here ``ctl-*``) as soon as the
    namespace is being deleted, before the DELETED events of what is in it. The operator forgets
    that namespace's GLMDeployments and pods itself: the GPUs they held are free for the next
    plan, and nothing of them is left in its metrics (nor reconciled at each resync)."""
    import urllib.request

    from tests.harness.cluster import free_port

    def metrics_text() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as resp:
            return str(resp.read().decode())

    def h200_gpus(obj: dict[str, Any]) -> int:
        variants = [v for v in obj["status"]["plan"]["variants"] if v["replicas"] > 0]
        assert {v["gpuProduct"] for v in variants} == {"NVIDIA-H200"}, variants
        return sum(v["replicas"] * v["gpusPerReplica"] for v in variants)

    # The fixture cluster's one H200 node (8 GPUs), taken whole: 8 replicas of one GPU each.
    fill = {"model": {"id": "zai-org/glm-4-9b-chat"}, "contextLength": 8192, "gpu": {"products": ["H200"]}}
    fill["replicas"] = 8
    metrics_port = free_port()
    doomed = f"{ns}-doomed"[:63]  # matches ctl-* as well
    operator.stop()
    try:
        operator.start("--metrics-port", str(metrics_port), "--metrics-host", "127.0.0.1")
        cluster.kubectl("create", "namespace", doomed)
        apply(cluster, doomed, manifest("filler", **fill))
        obj = wait_for(phase_is(cluster, doomed, "filler", "Ready"), 90, "filler Ready")
        assert h200_gpus(obj) == 8
        assert f'namespace="{doomed}"' in wait_for(metrics_text, 10, "metrics")
        delete_namespace(cluster, doomed, until_gone=True)  # through the namespace controller alone
        assert cluster.kubectl("get", "namespace", doomed, check=False).returncode != 0

        apply(cluster, ns, manifest("next", **fill))
        obj = wait_for(phase_is(cluster, ns, "next", "Ready"), 90, "the same 8 H200 GPUs planned again")
        assert h200_gpus(obj) == 8
        wait_for(lambda: f'namespace="{doomed}"' not in metrics_text(), 10, "the deleted one's series gone")
        assert 'namespaces "' + doomed + '" not found' not in operator.log_tail(200_000)
    finally:
        cluster.kubectl("delete", "namespace", doomed, "--ignore-not-found", "--wait=false", check=False)
        operator.stop()
        operator.start()


def test_hand_edits_to_a_child_are_reverted(cluster: E2ECluster, operator: RunningOperator, ns: str) -> None:
    """Children are level-reconciled: drift made by hand is undone on the child's watch event (the
    session operator's resync is 600 s, far beyond this test)."""
    apply(
        cluster,
        ns,
        small("drift"),
    )
    wait_for(phase_is(cluster, ns, "drift", "Ready"), 60, "Ready")
    (dep,) = children(cluster, ns, "drift")
    name = dep["metadata"]["name"]
    cluster.kubectl("scale", "deployment", name, "-n", ns, "--replicas=3")
    cluster.kubectl("delete", "service", "drift", "-n", ns)

    def restored() -> bool:
        (d,) = children(cluster, ns, "drift")
        services = [s for s in get(cluster, ns, "services")["items"] if s["metadata"]["name"] == "drift"]
        return d["spec"]["replicas"] == 1 and len(services) == 1

    wait_for(restored, 30, "replicas and Service restored")


def test_the_resync_repairs_drift_no_watch_event_reveals(
    cluster: E2ECluster, operator: RunningOperator, ns: str
) -> None:
    """A label edited by hand does not bump the child's generation, so its watch event does not
    make the operator re-apply; the periodic resync (5 s here) does."""
    operator.stop()
    fast = RunningOperator(cluster.local, operator.workdir, resync_seconds=5)
    try:
        fast.kubeconfig = operator.kubeconfig
        fast.start()
        apply(cluster, ns, small("resync"))
        wait_for(phase_is(cluster, ns, "resync", "Ready"), 60, "Ready")
        (dep,) = children(cluster, ns, "resync")
        name = dep["metadata"]["name"]
        cluster.kubectl(
            "label", "deployment", name, "-n", ns, "app.kubernetes.io/part-of=edited", "--overwrite"
        )

        def restored() -> bool:
            (d,) = children(cluster, ns, "resync")
            return bool(d["metadata"]["labels"]["app.kubernetes.io/part-of"] != "edited")

        wait_for(restored, 30, "label restored by the resync")
    finally:
        fast.stop()
        operator.start()
