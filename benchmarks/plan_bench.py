"""Planner speed: one GLMDeployment against 5,000 synthetic GPU nodes.

Usage: .venv/bin/python benchmarks/plan_bench.py [--nodes 5000] [--runs 7]

Builds Node dicts (mixed GPU types, GFD/GKE labels, some per-type resources and cordoned nodes),
warms the catalog caches once (as the operator process would), then times, per run:
parse_gpu_pools (Node dicts -> pools) + placement_request_from_spec + plan_placement, twice:

* *same nodes*: the same list of Node dicts every run, as the operator's node cache hands the
  planner between two node changes (re-plans on GPU usage, spec edits, resyncs);
* *one node changed*: before each run one node is replaced by a new dict (a watch event), so the
  planner reads a new node set (the changed node parsed, the others remembered per dict).

Prints the median and min over runs for the whole path and for each part. Not a timed assert.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from typing import Any

from glm_operator.catalog.gpus import load_gpus
from glm_operator.catalog.models import load_models
from glm_operator.planning.placement.plan import plan_placement
from glm_operator.planning.placement.request import placement_request_from_spec
from glm_operator.planning.supply.nodes import parse_gpu_pools

SPECS: dict[str, dict[str, Any]] = {
    "GLM-4.5-Air auto 32k x20": {
        "model": {"id": "zai-org/GLM-4.5-Air"},
        "contextLength": 32768,
        "replicas": 20,
    },
    "GLM-4.7 fp8 128k minConc 4": {
        "model": {"id": "zai-org/GLM-4.7"},
        "quantization": "fp8",
        "contextLength": 131072,
        "minConcurrency": 4,
        "replicas": 8,
        "gpu": {"allowMultiNode": True},
    },
}


def synthetic_nodes(n: int, seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    gpus = [g for g in load_gpus()]
    nodes = []
    for i in range(n):
        gpu = rng.choice(gpus)
        labels = {"kubernetes.io/hostname": f"node-{i}"}
        allocatable: dict[str, str] = {"cpu": "96", "memory": "1Ti"}
        kind = rng.random()
        if kind < 0.05:  # CPU node
            pass
        elif kind < 0.10:  # mixed machine with per-type resources
            other = rng.choice(gpus)
            allocatable[gpu.resource_names[0]] = "1"
            allocatable[other.resource_names[0]] = "1"
        else:
            gke = gpu.label("gke")
            if gke and rng.random() < 0.3:
                labels["cloud.google.com/gke-accelerator"] = gke
            else:
                labels["nvidia.com/gpu.product"] = gpu.label("gfd") or gpu.name
            allocatable["nvidia.com/gpu"] = str(rng.choice([1, 2, 4, 8, 8, 8]))
        nodes.append(
            {
                "kind": "Node",
                "metadata": {"name": f"node-{i}", "labels": labels},
                "spec": {"unschedulable": rng.random() < 0.02},
                "status": {"allocatable": allocatable},
            }
        )
    return nodes


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    load_models()
    load_gpus()
    nodes = synthetic_nodes(args.nodes)
    print(f"{args.nodes} synthetic nodes, {args.runs} runs each (catalog pre-loaded)")
    for name, spec in SPECS.items():
        plan_placement(placement_request_from_spec(spec, parse_gpu_pools(nodes)))  # warm fit caches once
        for change in (False, True):
            total, parse, place = [], [], []
            for run in range(args.runs):
                if change:  # a watch event: the node's dict is replaced, the others stay
                    at = run * 7919 % len(nodes)
                    meta = nodes[at]["metadata"]
                    labels = {**meta["labels"], "bench/revision": f"{name} {run}"}
                    nodes[at] = {**nodes[at], "metadata": {**meta, "labels": labels}}
                t0 = time.perf_counter()
                pools = parse_gpu_pools(nodes)
                t1 = time.perf_counter()
                plan = plan_placement(placement_request_from_spec(spec, pools))
                t2 = time.perf_counter()
                parse.append(t1 - t0)
                place.append(t2 - t1)
                total.append(t2 - t0)
            ms = {
                part: statistics.median(values) * 1000 for part, values in (("parse", parse), ("plan", place))
            }
            print(
                f"{name}, {'one node changed' if change else 'same nodes'}: "
                f"median {statistics.median(total) * 1000:.1f} ms (min {min(total) * 1000:.1f}) "
                f"= parse {ms['parse']:.1f} + plan {ms['plan']:.1f} ms; "
                f"{len(pools)} pools, {len(plan.variants)} variants, {plan.replicas_planned} replicas"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
