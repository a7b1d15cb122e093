"""The autoscaler scales on what the reconciler's plan gave (``desired.scaling``) and plans nothing
itself; its step is pure around ``decide`` (``desired.scaling.scale``), and its status write is
conditional on the version it read: a 409 decides again at the next tick, from the newer one."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from collections.abc import Callable
from typing import Any

from glm_operator.api.v1alpha1 import API_VERSION, KIND, spec_from_dict
from glm_operator.clients.prometheus import PrometheusQueueClient
from glm_operator.controller.autoscaler import TICK_SECONDS, Autoscaler
from glm_operator.controller.cache import ClusterCache
from glm_operator.controller.recorder import EventRecorder
from glm_operator.controller.workqueue import WorkQueue
from glm_operator.desired import compute_desired
from glm_operator.desired.model import ScalingTargets
from glm_operator.desired.scaling import scale
from glm_operator.planning.placement.plan import plan_placement
from glm_operator.planning.placement.request import placement_request
from glm_operator.planning.scaling.autoscale import QueueSample
from glm_operator.planning.supply.capacity import observed_capacity
from glm_operator.planning.supply.nodes import parse_gpu_pools
from tests.harness.clock import START, ManualClock
from tests.harness.controller import drain
from tests.harness.fake_api import FakeApi

from .test_capacity import NODEPOOLS, NOW, SMALL, nodepool, observed
from .test_prometheus_client import FakePrometheus, Responder, by_metric, prometheus, vector  # noqa: F401

H100 = "NVIDIA-H100-80GB-HBM3"
SCALED = {**SMALL, "gpu": {"products": ["H100"]}, "autoscaling": {"minReplicas": 1, "maxReplicas": 20}}


def test_the_targets_come_from_the_plan_for_max_replicas_on_the_reconciles_supply() -> None:
    """One replica planned on a Karpenter H100 pool without limits (8 GPUs a machine): the
    reconcile's plan offers one new machine (8 replicas); the autoscaler's capacity is what a plan
    made for maxReplicas on the same supply places (20)."""
    unbounded = nodepool("gpu-h100")
    del unbounded["spec"]["limits"]
    obs = observed(SCALED, [unbounded])
    desired = compute_desired(obs)
    assert desired.plan is not None and desired.scaling is not None
    assert desired.plan.replicas_planned == 1
    assert sum(v.capacity_replicas for v in desired.plan.variants) == 8, "the reconcile's own plan"
    spec = spec_from_dict(SCALED)
    supply = observed_capacity(parse_gpu_pools([], {}), [], obs.elastic, [], NOW, 20)
    at_max = plan_placement(placement_request(spec, supply.pools, obs.default_image, replicas=20))
    (variant,) = [v for v in at_max.variants if v.replicas]
    assert desired.scaling == ScalingTargets(
        capacity=at_max.replicas_planned,
        replica_concurrency=float(variant.knee_concurrency),
        replica_capacity=float(variant.max_num_seqs),
        first_replica=(H100, True, ("NodePool gpu-h100",)),
    )
    assert desired.scaling.capacity == 20
    # the pool's limit (16 GPUs) caps it
    assert compute_desired(observed(SCALED, NODEPOOLS)).scaling == dataclasses.replace(
        desired.scaling, capacity=16
    )


def test_without_autoscaling_or_without_a_spec_there_are_no_targets() -> None:
    assert compute_desired(observed({**SMALL, "gpu": {"products": ["H100"]}}, NODEPOOLS)).scaling is None
    bad = {**SCALED, "autoscaling": {"minReplicas": 3, "maxReplicas": 2}}
    assert compute_desired(observed(bad, NODEPOOLS)).scaling is None


def test_nothing_fits_means_no_capacity_and_the_wake_up_note_says_so() -> None:
    spec = {"model": {"id": "zai-org/GLM-4.5"}, "quantization": "bf16", "gpu": {"products": ["L4"]}}
    d = compute_desired(observed({**spec, "autoscaling": {"minReplicas": 0, "maxReplicas": 3}}, NODEPOOLS))
    assert d.status["phase"] == "Failed"
    assert d.scaling == ScalingTargets(0, 1.0, 1.0, None)


TARGETS = ScalingTargets(capacity=4, replica_concurrency=8.0, replica_capacity=16.0, first_replica=None)


def glmd(status: dict[str, Any], **autoscaling: Any) -> dict[str, Any]:
    spec = {**SMALL, "autoscaling": {"minReplicas": 1, "maxReplicas": 6, **autoscaling}}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": "m", "namespace": "llm", "uid": "u1", "generation": 1},
        "spec": spec,
        "status": status,
    }


def test_scale_up_writes_the_autoscalers_fields_and_one_event() -> None:
    body = glmd({"desiredReplicas": 1, "readyReplicas": 1})
    spec = spec_from_dict(body["spec"])
    queued = QueueSample(waiting=40.0, running=8.0, timestamp=START.timestamp())
    scaled = scale(body, spec, TARGETS, queued, [], START)
    assert (scaled.current, scaled.replicas, scaled.direction) == (1, 2, "up")
    assert scaled.status["desiredReplicas"] == 2
    assert scaled.status["autoscaler"]["lastScaleTime"] == "2026-12-01T00:00:00Z"
    assert scaled.status["autoscaler"]["queueLength"] == 40.0
    assert [(e.type, e.reason) for e in scaled.events] == [("Normal", "ScaledUp")]
    assert scaled.events[0].message.startswith("1 -> 2 replicas: ")

    full = scale(body, spec, dataclasses.replace(TARGETS, capacity=1), queued, [], START)
    assert (full.replicas, full.direction, full.events) == (1, "hold", ())
    assert "GPU pools can host only 1 replicas" in full.status["autoscaler"]["reason"]

    held = scale(body, spec, TARGETS, None, [], START)
    assert (held.replicas, held.direction, held.events) == (1, "unavailable", ())


def test_at_zero_the_wake_up_note_names_the_node_pool_the_first_replica_waits_for() -> None:
    body = glmd({"desiredReplicas": 0}, minReplicas=0)
    spec = spec_from_dict(body["spec"])
    first = dataclasses.replace(TARGETS, first_replica=(H100, True, ("NodePool gpu-h100",)))
    scaled = scale(body, spec, first, None, [], START, wake_requested=True)
    assert (scaled.replicas, scaled.direction) == (1, "unavailable")
    assert "from a node launched for it (NodePool gpu-h100)" in scaled.status["autoscaler"]["wakeUp"]


def waiting(count: str) -> Responder:
    return by_metric(vector(count, timestamp=START.timestamp()), vector("8", timestamp=START.timestamp()))


def test_the_status_write_is_conditional_and_a_409_decides_again_from_the_newer_version(
    prometheus: Callable[[Responder], FakePrometheus],  # noqa: F811
) -> None:
    api = FakeApi()
    stored = api.put(glmd({"desiredReplicas": 1, "readyReplicas": 1}))
    cache = ClusterCache()
    cache.owned.set_glmdeployment(stored)
    clock = ManualClock()
    queue: WorkQueue[tuple[str, str]] = WorkQueue(clock)
    autoscaler = Autoscaler(
        prometheus=PrometheusQueueClient(prometheus(waiting("40")).url, retries=0),
        api=api,  # type: ignore[arg-type]
        cache=cache,
        recorder=EventRecorder(api),  # type: ignore[arg-type]
        queue=queue,
        clock=clock,
        is_leader=lambda: True,
    )
    key = ("llm", "m")

    async def tick() -> None:
        await autoscaler.tick()
        await autoscaler.recorder.flush(5.0)

    asyncio.run(tick())
    assert api.writes("status") == [], "no plan from the reconciler yet: nothing to scale on"
    autoscaler.planned(key, TARGETS)

    # Someone else changed the object after the cache saw it: the write is refused, not forced.
    api.put({**copy.deepcopy(stored), "metadata": {**stored["metadata"], "labels": {"x": "y"}}})
    clock.advance(TICK_SECONDS)
    asyncio.run(tick())
    assert api.writes("status") == [("status", KIND, "m")]
    live = api.get_object(API_VERSION, KIND, *key)
    assert live is not None and live["status"] == stored["status"], "nothing written over the newer"
    assert api.events == [] and drain(queue) == []

    # Its watch event arrives; the next tick (not the next interval) decides again and writes.
    cache.owned.set_glmdeployment(live)
    clock.advance(TICK_SECONDS)
    asyncio.run(tick())
    live = api.get_object(API_VERSION, KIND, *key)
    assert live is not None and live["status"]["desiredReplicas"] == 2
    assert [(t, r) for t, r, _ in api.events] == [("Normal", "ScaledUp")]
    assert drain(queue) == [key], "the reconcile applies the new total"
    assert cache.owned.glmdeployments[key]["status"]["desiredReplicas"] == 2
