"""The operator's per-GLMDeployment gauges (controller.metrics.record) that the chart's dashboards
and alerts read: set from the status a reconcile wrote, GPU types gone from the plan and deleted
objects leave no series behind. The real reconciler on the in-memory API."""

from __future__ import annotations

import copy

from glm_operator.api.v1alpha1 import API_VERSION, KIND, PHASES
from glm_operator.controller import metrics
from glm_operator.controller.config import OperatorConfig
from glm_operator.controller.manager import Manager
from tests.harness.controller import reconciling
from tests.harness.fake_api import FakeApi
from tests.harness.scenarios import BODY, NODES

R = metrics.REGISTRY


def value(metric: str, **labels: str) -> float | None:
    return R.get_sample_value(metric, labels)


def series(name: str, namespace: str, obj: str) -> list[dict[str, str]]:
    return [
        dict(s.labels)
        for family in R.collect()
        for s in family.samples
        if s.name == name and s.labels.get("namespace") == namespace and s.labels.get("name") == obj
    ]


def test_a_reconcile_sets_the_gauges_of_its_status_and_a_deletion_drops_them() -> None:
    api = FakeApi()
    r = reconciling(api, OperatorConfig(leader_election=False), NODES)
    body = copy.deepcopy(BODY)
    body["metadata"]["name"] = "metrics-g"
    r.wired.handlers.on_glmdeployment("ADDED", api.put(body))
    key = ("llm", "metrics-g")
    r.reconcile(key)
    written = api.get_object(API_VERSION, KIND, *key)
    assert written is not None
    status = written["status"]
    ns, name = key

    assert value("glm_operator_glmdeployment_info", namespace=ns, name=name, model_name="glm-4.5-air",
                 model="zai-org/GLM-4.5-Air") == 1  # fmt: skip
    phases = {p: value("glm_operator_glmdeployment_phase", namespace=ns, name=name, phase=p) for p in PHASES}
    assert phases == {p: 1.0 if p == status["phase"] else 0.0 for p in PHASES}
    assert value("glm_operator_desired_replicas", namespace=ns, name=name) == status["desiredReplicas"]
    assert value("glm_operator_ready_replicas", namespace=ns, name=name) == 0
    assert value("glm_operator_max_replicas", namespace=ns, name=name) == body["spec"].get("replicas", 1)
    for v in status["plan"]["variants"]:
        labels = {"namespace": ns, "name": name, "gpu_product": v["gpuProduct"]}
        assert value("glm_operator_planned_kv_cache_tokens", **labels) == v["kvCacheTokens"]
        assert value("glm_operator_planned_gpus", **labels) == v["replicas"] * v["gpusPerReplica"]
        assert value("glm_operator_planned_replicas", **labels) == v["replicas"]
    memory = value(
        "glm_operator_planned_gpu_memory_bytes", namespace=ns, name=name,
        gpu_product=status["plan"]["variants"][0]["gpuProduct"],
    )  # fmt: skip
    assert memory is not None and 60 * 2**30 < memory < 80 * 2**30  # an 80 GB GPU at 0.92

    # the spec now allows L4 only: the H100/A100 series go, L4's come
    body = copy.deepcopy(written)
    body["spec"] = {**body["spec"], "gpu": {"products": ["L4"]}, "quantization": "int4"}
    body["spec"]["autoscaling"] = {"minReplicas": 1, "maxReplicas": 5}
    body["metadata"]["generation"] = 2
    r.wired.handlers.on_glmdeployment("MODIFIED", api.put(body))
    r.reconcile(key)
    assert value("glm_operator_max_replicas", namespace=ns, name=name) == 5
    products = {s["gpu_product"] for s in series("glm_operator_planned_kv_cache_tokens", ns, name)}
    status = api.get_object(API_VERSION, KIND, *key)["status"]
    assert products == {v["gpuProduct"] for v in status["plan"]["variants"]} == {"NVIDIA-L4"}

    r.wired.handlers.on_glmdeployment("DELETED", api.get_object(API_VERSION, KIND, *key))
    r.reconcile(key)
    for family in ("info", "phase"):
        assert not series(f"glm_operator_glmdeployment_{family}", ns, name)
    gauges = ("planned_kv_cache_tokens", "planned_gpus", "planned_gpu_memory_bytes", "ready_replicas")
    for gauge in (*gauges, "max_replicas"):
        assert not series(f"glm_operator_{gauge}", ns, name), gauge


def test_the_leader_gauge_is_set_when_this_replica_starts_leading() -> None:
    metrics.LEADER.set(0)
    manager = Manager(OperatorConfig(leader_election=False), FakeApi())
    assert value("glm_operator_leader") == 0
    manager._started_leading()
    assert value("glm_operator_leader") == 1


def test_autoscaler_decisions_are_counted_per_glmdeployment_and_forgotten_with_it() -> None:
    metrics.count_autoscaler_decision("llm", "scaled", "up")
    metrics.count_autoscaler_decision("llm", "scaled", "up")
    counts = {
        s["direction"]: value("glm_operator_autoscaler_decisions_total", **s)
        for s in series("glm_operator_autoscaler_decisions_total", "llm", "scaled")
    }
    assert counts == {"up": 2, "down": 0, "hold": 0, "unavailable": 0}
    metrics.forget("llm", "scaled")
    assert not series("glm_operator_autoscaler_decisions_total", "llm", "scaled")
