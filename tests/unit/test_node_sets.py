"""The planner's per-node-set memo (planning.supply.nodes) decides exactly as walking every node does.

Random clusters are built from the fixture's nodes (GFD, GKE, per-type resources, unknown and
estimated GPU types, CPU nodes) with random readiness, cordons, GPU usage, outages held and
Karpenter NodePools, and changed between calls the way the operator's node cache changes them (a
changed node is a new dict, the others stay the same dicts): pools, their grouping, outages,
plans and whole reconciles must equal those of the uncached walk.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import datetime as dt
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from glm_operator.desired import compute_desired
from glm_operator.desired import plan as desired_module
from glm_operator.planning.placement import candidates as placement_module
from glm_operator.planning.placement.plan import plan_placement
from glm_operator.planning.placement.request import PlanningInputError, placement_request_from_spec
from glm_operator.planning.supply import nodes as nodes_module
from glm_operator.planning.supply.capacity import ElasticCapacityInput, capacity_pools
from glm_operator.planning.supply.nodes import GpuPool, group_pools, parse_gpu_pools, walk_gpu_pools
from glm_operator.planning.supply.outages import node_outage, node_outages
from glm_operator.planning.supply.pools import ElasticPool, parse_karpenter_nodepools
from tests.harness.scenarios import observed

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gpu-cluster.yaml"
TEMPLATES: list[dict[str, Any]] = yaml.safe_load(FIXTURE.read_text())["items"]
NODEPOOLS = [
    d
    for d in yaml.safe_load_all((FIXTURE.parent / "karpenter" / "nodepools.yaml").read_text())
    if d["kind"] == "NodePool"
]
ELASTIC: tuple[ElasticPool, ...] = parse_karpenter_nodepools(NODEPOOLS)[0]
NOW = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)

EXTRA_TEMPLATES: list[dict[str, Any]] = [
    {  # an unknown GPU with GFD memory/compute labels: estimated
        "kind": "Node",
        "metadata": {
            "name": "x",
            "labels": {
                "nvidia.com/gpu.product": "NVIDIA-Future-96GB",
                "nvidia.com/gpu.memory": "98304",
                "nvidia.com/gpu.compute.major": "9",
                "nvidia.com/gpu.compute.minor": "0",
            },
        },
        "spec": {},
        "status": {"allocatable": {"nvidia.com/gpu": "4"}},
    },
    {  # an unknown GPU without labels to size it: reported, not used
        "kind": "Node",
        "metadata": {"name": "x", "labels": {"nvidia.com/gpu.product": "Mystery-GPU"}},
        "spec": {},
        "status": {"allocatable": {"nvidia.com/gpu": "2"}},
    },
]

SPECS: list[dict[str, Any]] = [
    {"model": {"id": "zai-org/glm-4-9b-chat"}, "contextLength": 8192},
    {"model": {"id": "zai-org/GLM-4.5-Air"}, "contextLength": 32768},
    {"model": {"id": "zai-org/GLM-4.7-Flash"}, "gpu": {"products": ["NVIDIA-L4", "NVIDIA-H100-80GB-HBM3"]}},
    {"model": {"id": "zai-org/GLM-4.7"}, "quantization": "fp8", "gpu": {"allowMultiNode": True}},
    {"model": {"id": "zai-org/GLM-4.5-Air"}, "gpu": {"products": ["NVIDIA-Future-96GB"]}},
]


def random_spec(rng: random.Random) -> dict[str, Any]:
    """One of SPECS with some of the values a fit depends on changed."""
    spec = copy.deepcopy(rng.choice(SPECS))
    if rng.random() < 0.3:
        spec["minConcurrency"] = rng.choice([1, 2, 8])
    if rng.random() < 0.3:
        spec["guaranteeMinConcurrency"] = True
    if rng.random() < 0.3:
        spec["kvCacheDtype"] = "fp8"
    if rng.random() < 0.3:
        spec["contextLength"] = rng.choice([4096, 65536])
    if rng.random() < 0.3:
        spec.setdefault("gpu", {})["memoryUtilization"] = 0.8
    if rng.random() < 0.3:
        spec.setdefault("serving", {})["maxNumSeqs"] = 16
    if rng.random() < 0.3:
        spec.setdefault("serving", {})["image"] = "vllm/vllm-openai:v0.11.0"
    return spec


def _ready(status: str, since: str = "2026-11-29T23:59:00Z") -> list[dict[str, Any]]:
    return [{"type": "Ready", "status": status, "lastTransitionTime": since}]


def random_node(rng: random.Random, name: str) -> dict[str, Any]:
    node = copy.deepcopy(rng.choice(TEMPLATES + EXTRA_TEMPLATES))
    node["metadata"]["name"] = name
    node["metadata"].setdefault("labels", {})["kubernetes.io/hostname"] = name
    roll = rng.random()
    if roll < 0.08:
        node.setdefault("spec", {})["unschedulable"] = True
    elif roll < 0.16:
        node.setdefault("status", {})["conditions"] = _ready(rng.choice(["False", "Unknown"]))
    elif roll < 0.5:
        node.setdefault("status", {})["conditions"] = _ready("True")
    return node


def random_usage(rng: random.Random, pools: tuple[GpuPool, ...], nodes: list[dict[str, Any]]) -> dict:
    """GPUs in use on some nodes: the pools' resources, sometimes 0 or more than the node has,
    and a few names of nodes that are not in the list."""
    used: dict[str, dict[str, int]] = {}
    for pool in pools:
        if rng.random() < 0.4:
            used.setdefault(pool.node_name, {})[pool.resource_name] = rng.randint(0, pool.gpu_count + 1)
    for node in rng.sample(nodes, k=min(2, len(nodes))):
        used.setdefault(str(node["metadata"]["name"]), {})
    used["gone-node"] = {"nvidia.com/gpu": 3}
    return used


def random_held(rng: random.Random, nodes: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    if rng.random() < 0.6:
        return {}
    names = [str(n["metadata"]["name"]) for n in nodes]
    return {name: {"nvidia.com/gpu": rng.randint(0, 8)} for name in rng.sample(names, k=min(3, len(names)))}


def change_some(rng: random.Random, nodes: list[dict[str, Any]], counter: list[int]) -> list[dict[str, Any]]:
    """What a node cache does between two reconciles: replace a few dicts, add or delete nodes."""
    out = list(nodes)
    for _ in range(rng.randint(0, 3)):
        action = rng.random()
        if action < 0.5 and out:
            at = rng.randrange(len(out))
            out[at] = random_node(rng, str(out[at]["metadata"]["name"]))
        elif action < 0.8:
            counter[0] += 1
            out.append(random_node(rng, f"new-{counter[0]}"))
        elif out:
            out.pop(rng.randrange(len(out)))
    return out


@contextlib.contextmanager
def uncached() -> Iterator[None]:
    """The planner without its memos: every node walked, every pool grouped, every fit estimated."""
    with (
        mock.patch.object(desired_module, "parse_gpu_pools", walk_gpu_pools),
        mock.patch.object(nodes_module, "_known_prefix", lambda pools: None),
        mock.patch.object(placement_module, "_EVALUATIONS_KEPT", 0),
    ):
        yield


def plan_or_error(spec: dict[str, Any], pools: tuple[GpuPool, ...], batched: int | None = None) -> Any:
    """The plan, or the input error; ``batched``: max_num_batched_tokens (not a spec field)."""
    try:
        request = placement_request_from_spec({**spec, "replicas": 3}, pools)
        return plan_placement(dataclasses.replace(request, max_num_batched_tokens=batched))
    except PlanningInputError as exc:
        return str(exc)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 40))
def test_cached_pools_outages_and_plans_equal_the_walk(seed: int, size: int) -> None:
    rng = random.Random(seed)
    counter = [0]
    nodes = [random_node(rng, f"n{i}") for i in range(size)]
    for _ in range(4):  # the same node set again (memo hits), then a changed one
        walked = walk_gpu_pools(nodes)
        used = random_usage(rng, walked, nodes)
        held = random_held(rng, nodes)
        for args in ((), (used,), (used, held), (None, held)):
            cached = parse_gpu_pools(nodes, *args)
            assert cached == walk_gpu_pools(nodes, *args)
        every = {}
        for node in nodes:
            outage = node_outage(node, NOW, 300.0)
            if outage is not None:
                every[outage.node_name] = outage
        assert node_outages(nodes, NOW, 300.0) == every
        spec = random_spec(rng)
        pools = parse_gpu_pools(nodes, used, held)
        elastic = rng.sample(ELASTIC, k=rng.randint(0, len(ELASTIC)))
        replicas = rng.randint(1, 3)
        with_elastic = capacity_pools(pools, elastic, (), replicas=replicas)
        for grouped in (pools, with_elastic):
            with uncached():  # grouped by walking every pool
                walked_groups = group_pools(grouped)
            assert group_pools(grouped) == walked_groups
            if not held and pools:  # a node set's result (not a walk): grouped by its layout
                assert nodes_module._known_prefix(grouped) is not None
        batched = rng.choice([None, None, 2048])
        cached_plans = [plan_or_error(spec, p, batched) for p in (pools, with_elastic)]
        with uncached():
            walked = walk_gpu_pools(nodes, used, held)
            walked_elastic = capacity_pools(walked, elastic, (), replicas=replicas)
            assert cached_plans == [plan_or_error(spec, p, batched) for p in (walked, walked_elastic)]
        if rng.random() < 0.5:
            nodes = change_some(rng, nodes, counter)


def test_a_changed_node_dict_is_read_again() -> None:
    """The memo is keyed by the dicts: a node replaced by a new dict (a watch event) is re-read."""
    nodes = [random_node(random.Random(1), f"n{i}") for i in range(5)]
    nodes[2] = copy.deepcopy(TEMPLATES[2])  # an H100 node with 8 GPUs
    before = parse_gpu_pools(nodes)
    assert parse_gpu_pools(nodes) is before  # the same node set: nothing re-read
    changed = copy.deepcopy(nodes[2])
    changed["spec"]["unschedulable"] = True
    after = parse_gpu_pools([*nodes[:2], changed, *nodes[3:]])
    assert after == walk_gpu_pools([*nodes[:2], changed, *nodes[3:]])
    assert len(after) == len(before) - 1


@pytest.mark.parametrize("seed", range(6))
def test_whole_reconciles_equal_the_uncached_walk(seed: int) -> None:
    """compute_desired over a changing cluster (with and without NodePools): the same Desired
    with the memo as without it."""
    rng = random.Random(seed)
    counter = [0]
    nodes = [random_node(rng, f"n{i}") for i in range(30)]
    for step in range(5):
        spec = {**random_spec(rng), "replicas": rng.randint(1, 4)}
        obs = observed(spec, nodes, name=f"g{step}")
        used = random_usage(rng, walk_gpu_pools(nodes), nodes)
        nodepools = rng.sample(NODEPOOLS, k=rng.randint(0, 2))
        obs = dataclasses.replace(obs, gpus_used=used, elastic=ElasticCapacityInput(nodepools=nodepools))
        cached = compute_desired(obs)
        with uncached():
            assert compute_desired(obs) == cached
        nodes = change_some(rng, nodes, counter)


def test_the_fit_memo_tells_every_field_a_fit_reads_apart() -> None:
    """Specs that differ in one value a fit reads, planned one after the other (memo warm), plan as
    they would alone; the guarantee changes the plan only near the margin, as here."""
    pools = walk_gpu_pools(TEMPLATES)
    base = {"model": {"id": "zai-org/GLM-4.5-Air"}, "contextLength": 65536, "minConcurrency": 7}
    specs = [
        base,
        {**base, "guaranteeMinConcurrency": True},
        {**base, "minConcurrency": 8},
        {**base, "kvCacheDtype": "fp8"},
        {**base, "gpu": {"memoryUtilization": 0.8}},
        {**base, "serving": {"maxNumSeqs": 16}},
        {**base, "serving": {"image": "vllm/vllm-openai:v0.11.0"}},
        {**base, "contextLength": 32768},
    ]
    plans = [plan_or_error(spec, pools) for spec in specs] + [plan_or_error(base, pools, 2048)]
    with uncached():
        alone = [plan_or_error(spec, pools) for spec in specs] + [plan_or_error(base, pools, 2048)]
    assert plans == alone
    assert plans[0] != plans[1]  # the guarantee case is one the memo could confuse
