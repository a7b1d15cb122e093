"""A running variant keeps its GPU type and pods through short node outages, and, with no GPU type
preferred, through spec changes and other workloads' churn (compute_desired)."""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

from glm_operator.api.v1alpha1 import LABEL_GPU_PRODUCT
from glm_operator.desired import Desired, compute_desired
from glm_operator.desired.children import variant_slug

from .test_desired import NODES, NOW, body, observe

START = dt.datetime.fromisoformat(NOW.replace("Z", "+00:00"))
# Every H100 node of the fixture: the outage takes the whole GPU type away.
H100_NODES = tuple(
    n["metadata"]["name"]
    for n in NODES
    if n["metadata"]["labels"].get("nvidia.com/gpu.product") == "NVIDIA-H100-80GB-HBM3"
)


def at(seconds: float) -> str:
    return (START + dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def nodes_with(names: tuple[str, ...], ready: str = "Unknown", since: float = 0.0, **spec: Any) -> list[Any]:
    out = copy.deepcopy(NODES)
    for node in out:
        if node["metadata"]["name"] in names:
            if spec:
                node.setdefault("spec", {}).update(spec)
            else:
                node["status"]["conditions"] = [
                    {"type": "Ready", "status": ready, "lastTransitionTime": at(since)}
                ]
    return out


def air(**spec: Any) -> dict[str, Any]:
    spec = {
        "model": {"id": "zai-org/GLM-4.5-Air"},
        "contextLength": 32768,
        "gpu": {"products": ["H100", "A100-80GB"]},
        "replicas": 2,
        **spec,
    }
    return spec


def nodes_of(child_name: str) -> list[str]:
    """Fixture nodes of the GPU type a child Deployment (g-<variant slug>) runs on."""
    return [
        n["metadata"]["name"]
        for n in NODES
        if child_name == "g-" + variant_slug(n["metadata"]["labels"].get("nvidia.com/gpu.product", "-"))
    ]


class Running:
    """The cluster after a first reconcile: children created, pods bound and Ready."""

    def __init__(self, spec: dict[str, Any], generation: int = 1) -> None:
        first = compute_desired(observe(body(generation=generation, **spec)))
        self.spec = spec
        self.generation = generation
        self.status = first.status
        self.children = [copy.deepcopy(o) for o in first.objects if o["kind"] == "Deployment"]
        self.pods: list[dict[str, Any]] = []
        for child in self.children:
            name, replicas = child["metadata"]["name"], child["spec"]["replicas"]
            child["status"] = {"replicas": replicas, "readyReplicas": replicas, "updatedReplicas": replicas}
            limits = child["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
            hosts = nodes_of(name)
            for i in range(replicas):
                self.pods.append(
                    {
                        "metadata": {"name": f"{name}-{i}"},
                        "spec": {
                            "nodeName": hosts[i % len(hosts)],
                            "containers": [{"resources": {"limits": limits}}],
                        },
                        "status": {"phase": "Running"},
                    }
                )

    def reconcile(self, nodes: list[Any], now: str, ready: int | None = None, **kw: Any) -> Desired:
        if ready is not None:
            for child in self.children:
                child["status"]["readyReplicas"] = ready
        b = body(
            generation=kw.pop("generation", self.generation), status=self.status, **kw.pop("spec", self.spec)
        )
        return compute_desired(observe(b, nodes=nodes, children=self.children, pods=self.pods, now=now, **kw))


def deployments(d: Desired) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in d.objects if o["kind"] == "Deployment"}


def degraded(d: Desired) -> dict[str, Any]:
    return next(c for c in d.status["conditions"] if c["type"] == "Degraded")


def test_h100_outage_within_the_grace_changes_no_child_and_says_degraded() -> None:
    run = Running(air())
    (name,) = [c["metadata"]["name"] for c in run.children]
    assert name == "g-h100-80gb-hbm3"
    d = run.reconcile(nodes_with(H100_NODES, "Unknown", since=0), at(60), ready=0)
    before = {k: v for k, v in run.children[0].items() if k != "status"}
    assert deployments(d)[name] == before  # same object: nothing re-applied differently, no roll
    assert d.prune == ()
    assert degraded(d)["status"] == "True" and degraded(d)["reason"] == "GPUNodesUnavailable"
    assert f"h100-sxm-0 (Unknown since {at(0)})" in degraded(d)["message"]
    assert f"(until {at(300)})" in degraded(d)["message"]
    assert d.status["phase"] == "Degraded"
    assert d.requeue_after is not None and 240 <= d.requeue_after <= 242


def test_past_the_grace_the_variant_moves_and_the_old_child_is_pruned() -> None:
    run = Running(air())
    d = run.reconcile(nodes_with(H100_NODES, "False", since=0), at(301), ready=0)
    assert list(deployments(d)) == ["g-a100-sxm4-80gb"]
    assert d.prune == (("apps/v1", "Deployment", "g-h100-80gb-hbm3"),)
    assert d.requeue_after is None


def test_the_grace_period_is_a_setting() -> None:
    run = Running(air())
    nodes = nodes_with(H100_NODES, "Unknown", since=0)
    assert "g-h100-80gb-hbm3" in deployments(run.reconcile(nodes, at(61), ready=0))
    moved = run.reconcile(nodes, at(61), ready=0, node_grace_seconds=60)
    assert list(deployments(moved)) == ["g-a100-sxm4-80gb"]


def test_deleted_nodes_replan_at_once() -> None:
    run = Running(air())
    nodes = [n for n in NODES if n["metadata"]["name"] not in H100_NODES]
    d = run.reconcile(nodes, at(5), ready=0)
    assert list(deployments(d)) == ["g-a100-sxm4-80gb"]
    assert d.prune == (("apps/v1", "Deployment", "g-h100-80gb-hbm3"),)


def test_a_spec_change_during_the_outage_replans() -> None:
    run = Running(air())
    d = run.reconcile(
        nodes_with(H100_NODES, "Unknown", since=0),
        at(30),
        ready=0,
        generation=2,
        spec=air(contextLength=16384),
    )
    assert list(deployments(d)) == ["g-a100-sxm4-80gb"]


def test_scale_up_during_the_outage_goes_where_capacity_is() -> None:
    run = Running(air())
    d = run.reconcile(nodes_with(H100_NODES, "Unknown", since=0), at(30), ready=0, spec=air(replicas=4))
    deps = deployments(d)
    assert deps["g-h100-80gb-hbm3"]["spec"]["replicas"] == 2  # kept where it runs
    assert deps["g-a100-sxm4-80gb"]["spec"]["replicas"] == 2  # the new replicas


def test_without_a_preference_list_an_outage_reorders_nothing() -> None:
    spec = air(gpu={"products": []})
    run = Running(spec)
    names = [c["metadata"]["name"] for c in run.children]
    down = tuple(sorted({p["spec"]["nodeName"] for p in run.pods}))
    d = run.reconcile(nodes_with(down, "Unknown", since=0), at(30), ready=0)
    assert sorted(deployments(d)) == sorted(names)
    assert d.prune == ()


def test_a_cordoned_node_keeps_its_ready_replicas_and_is_not_degraded() -> None:
    run = Running(air())
    d = run.reconcile(nodes_with(H100_NODES, unschedulable=True), at(3600))
    assert list(deployments(d)) == ["g-h100-80gb-hbm3"] and d.prune == ()
    assert degraded(d)["status"] == "False" and d.requeue_after is None


def test_ready_replicas_are_not_pruned_until_their_replacement_is_ready() -> None:
    run = Running(air())
    nodes = [n for n in NODES if n["metadata"]["name"] not in H100_NODES]
    d = run.reconcile(nodes, at(5), ready=2)  # nodes gone, the old pods still report Ready
    assert list(deployments(d)) == ["g-a100-sxm4-80gb"] and d.prune == ()
    replacement = copy.deepcopy(deployments(d)["g-a100-sxm4-80gb"])
    replacement["status"] = {"replicas": 2, "readyReplicas": 2, "updatedReplicas": 2}
    run.children.append(replacement)
    d = run.reconcile(nodes, at(60))
    assert d.prune == (("apps/v1", "Deployment", "g-h100-80gb-hbm3"),)


def test_the_status_does_not_change_while_an_outage_lasts() -> None:
    # A status that changed on every reconcile would trigger the next one through its watch event.
    run = Running(air())
    nodes = nodes_with(H100_NODES, "Unknown", since=0)
    first = run.reconcile(nodes, at(30), ready=0)
    run.status = first.status
    assert run.reconcile(nodes, at(45)).status == first.status


def glm_4_9b(context: int = 8192) -> dict[str, Any]:
    """One replica of a small model that fits every GPU type of the fixture, no type preferred."""
    return {"model": {"id": "zai-org/glm-4-9b-chat"}, "contextLength": context, "gpu": {"products": []}}


def running(gpu_product: str, context: int = 8192) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(children, pods) of glm_4_9b() running on ``gpu_product``: its Deployment, the pod bound."""
    on = [n for n in NODES if n["metadata"]["labels"].get("nvidia.com/gpu.product") == gpu_product]
    first = compute_desired(observe(body(**glm_4_9b(context)), nodes=on))
    (child,) = [copy.deepcopy(o) for o in first.objects if o["kind"] == "Deployment"]
    assert child["metadata"]["labels"][LABEL_GPU_PRODUCT] == gpu_product
    pod = {
        "metadata": {"name": f"{child['metadata']['name']}-0", "labels": {LABEL_GPU_PRODUCT: gpu_product}},
        "spec": {
            "nodeName": on[0]["metadata"]["name"],
            "containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
        "status": {"phase": "Running"},
    }
    return [child], [pod]


def test_with_no_gpu_order_a_new_spec_stays_on_the_type_its_replicas_run_on() -> None:
    """With gpu.products [] the first plan takes the type with the most free GPUs (the H100s);
    a replica that runs on an A100 (planned when the H100s were full) stays there through a spec
    change, although the H100s have more free GPUs now."""
    first = compute_desired(observe(body(**glm_4_9b())))
    assert list(deployments(first)) == ["g-h100-80gb-hbm3"]
    children, pods = running("NVIDIA-A100-SXM4-80GB")
    changed = compute_desired(observe(body(generation=2, **glm_4_9b(4096)), children=children, pods=pods))
    assert list(deployments(changed)) == ["g-a100-sxm4-80gb"]
    assert changed.prune == ()
    # in the middle of its rollout (the old pod gone, the new one not bound): still there
    rolling = compute_desired(observe(body(generation=2, **glm_4_9b(4096)), children=children))
    assert list(deployments(rolling)) == ["g-a100-sxm4-80gb"]


def test_with_no_gpu_order_other_workloads_churning_never_moves_a_running_replica() -> None:
    """Other deployments rolling out free and take GPUs of every type from one reconcile to the
    next (maxSurge 0: an old pod goes before its replacement is bound); the plan of a running
    replica follows none of it (each move deleted a child another reconcile created again)."""
    a100 = nodes_of("g-a100-sxm4-80gb")
    children, pods = running("NVIDIA-A100-SXM4-80GB")
    h100 = nodes_of("g-h100-80gb-hbm3")
    snapshots: list[dict[str, dict[str, int]]] = [
        {},
        {node: {"nvidia.com/gpu": 8} for node in h100},
        {a100[1]: {"nvidia.com/gpu": 8}, **{node: {"nvidia.com/gpu": 7} for node in h100}},
        {node: {"nvidia.com/gpu": 1} for node in [*h100, *a100]},
    ]
    for used in snapshots:
        b = body(generation=2, **glm_4_9b(4096))
        d = compute_desired(observe(b, children=children, pods=pods, gpus_used=used))
        assert list(deployments(d)) == ["g-a100-sxm4-80gb"], used
