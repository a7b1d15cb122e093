"""Planner CPU per reconcile: compute_desired replayed as the operator calls it, no cluster.

Usage: .venv/bin/python benchmarks/reconcile_plan_bench.py [--nodes 1000] [--glmds 200] [--rounds 3]
       [--profile N] [--profile-burst N] [--memory] [--split]

Builds the controller bench's inputs (``controller_bench.node_docs`` / ``glmd_docs``: 40 % 8xH100,
30 % 8xA100-80GB, 30 % 4xL4 with GFD labels; five small-model specs, 1-2 replicas) in the
operator's own watch cache (``controller.cache.ClusterCache``: slimmed nodes, GPU usage per pod),
then replays what the reconciles of the controller bench do:

1. *burst*: every GLMDeployment planned once, new (generation 1, empty status), in creation
   order; after each plan its pods are "scheduled" (first nodes of the planned GPU type with free
   GPUs) into the cache, so later plans see the GPUs taken, as in the real burst;
2. *re-plan* (``--rounds`` times): every GLMDeployment planned again with its status and pods, as a
   node change or a resync re-plans them all (the common reconcile at steady state).

Each reconcile is ``cache.gpus_used(exclude_owner=key)`` (what observe() reads) plus
``compute_desired``; CPU is measured with ``time.thread_time`` around each. Prints the median,
p90 and total per phase; ``--profile N`` also prints cProfile's top N functions by cumulative time
over the re-plan rounds, ``--profile-burst N`` the burst's top N by their own time; ``--memory``
traces allocations (tracemalloc, slower) and prints what the planner's memos hold at the end (memory
still allocated from planning.supply.nodes / planning.placement.candidates, which is the node sets,
pools with usage, grouping layouts and remembered fits). ``--split`` prints the CPU per reconcile of
the steps compute_desired calls (node side: parse_gpu_pools, node_outages; plan_placement;
render_all). Always prints the process's peak RSS. Figures only, no asserts.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import resource
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from benchmarks.controller_bench import glmd_docs, node_docs
from glm_operator.catalog.gpus import load_gpus
from glm_operator.catalog.models import load_models
from glm_operator.catalog.vllm import DEFAULT_VLLM_IMAGE
from glm_operator.controller.cache import ClusterCache, Key
from glm_operator.desired import Desired, Observed, compute_desired
from glm_operator.desired import children as children_step
from glm_operator.desired import plan as plan_step

NOW = "2026-11-30T00:00:00Z"
STEPS = ("parse_gpu_pools", "node_outages", "observed_capacity", "plan_placement", "render_all")


def _time_steps(cpu: dict[str, float]) -> None:
    """Wrap the steps compute_desired calls so their CPU time adds up in ``cpu``."""
    for step in STEPS:
        module = children_step if step == "render_all" else plan_step
        inner = getattr(module, step)

        def timed(*args: Any, _inner: Any = inner, _step: str = step, **kwargs: Any) -> Any:
            t0 = time.thread_time()
            try:
                return _inner(*args, **kwargs)
            finally:
                cpu[_step] = cpu.get(_step, 0.0) + time.thread_time() - t0

        setattr(module, step, timed)


def _observed(cache: ClusterCache, body: dict[str, Any], key: Key) -> Observed:
    return Observed(
        body=body,
        nodes=list(cache.nodes.values()),
        gpus_used=cache.gpus_used(exclude_owner=key),
        children=[],
        pods=cache.owned.pods_of(key),
        default_image=DEFAULT_VLLM_IMAGE,
        now=NOW,
    )


def _schedule(cache: ClusterCache, key: Key, desired: Desired, free: dict[str, int]) -> None:
    """Put the plan's pods on the first nodes of their GPU type with enough free GPUs."""
    if desired.plan is None:
        return
    n = 0
    for variant in desired.plan.variants:
        gpus = variant.gpus_per_replica
        for _ in range(variant.replicas):
            node = next(
                (
                    name
                    for name, spare in free.items()
                    if spare >= gpus
                    and cache.nodes[name]["metadata"]["labels"].get("nvidia.com/gpu.product")
                    == dict(variant.node_selector).get("nvidia.com/gpu.product", "")
                ),
                None,
            )
            if node is None:
                continue
            free[node] -= gpus
            n += 1
            pod = {
                "metadata": {"name": f"{key[1]}-{n}", "namespace": key[0], "uid": f"{key[0]}/{key[1]}/{n}"},
                "spec": {
                    "nodeName": node,
                    "containers": [{"name": "vllm", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
                },
                "status": {"phase": "Running"},
            }
            cache.set_pod(pod, key)
            cache.owned.set_pod(key, pod)


def _reconcile(cache: ClusterCache, body: dict[str, Any], key: Key) -> tuple[Desired, float]:
    t0 = time.thread_time()
    desired = compute_desired(_observed(cache, body, key))
    return desired, time.thread_time() - t0


def _report(name: str, samples: list[float]) -> None:
    if not samples:
        return  # e.g. --rounds 0
    ms = sorted(s * 1000 for s in samples)
    p90 = ms[min(len(ms) - 1, int(len(ms) * 0.9))]
    print(
        f"{name}: {len(ms)} reconciles, CPU per reconcile median {statistics.median(ms):.2f} ms, "
        f"p90 {p90:.2f} ms, total {sum(ms) / 1000:.2f} s"
    )


def _replan_all(cache: ClusterCache, bodies: dict[Key, dict[str, Any]], samples: list[float]) -> None:
    for key, body in bodies.items():
        _, cpu = _reconcile(cache, body, key)
        samples.append(cpu)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--glmds", type=int, default=200)
    ap.add_argument("--namespaces", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", type=int, default=0, help="print the top N functions (cumulative)")
    ap.add_argument(
        "--profile-burst", type=int, default=0, help="print the burst's top N functions by own time (tottime)"
    )
    ap.add_argument("--memory", action="store_true", help="print what the planner's memos hold")
    ap.add_argument("--split", action="store_true", help="print CPU per reconcile of compute_desired's steps")
    args = ap.parse_args()
    steps: dict[str, float] = {}
    if args.split:
        _time_steps(steps)
    if args.memory:
        tracemalloc.start()
    load_models()
    load_gpus()
    cache = ClusterCache()
    cache.replace_nodes(node_docs(args.nodes))
    free = {name: int(node["status"]["allocatable"]["nvidia.com/gpu"]) for name, node in cache.nodes.items()}
    namespaces = [f"bench-{i}" for i in range(args.namespaces)]
    bodies: dict[Key, dict[str, Any]] = {}
    for i, doc in enumerate(glmd_docs(args.glmds, namespaces)):
        meta = {**doc["metadata"], "uid": f"uid-{i}", "generation": 1}
        bodies[(meta["namespace"], meta["name"])] = {**doc, "metadata": meta, "status": {}}
    print(f"{args.nodes} nodes, {args.glmds} GLMDeployments (controller_bench inputs), planner in one thread")

    burst: list[float] = []

    def plan_burst() -> None:
        for key, body in bodies.items():
            desired, cpu = _reconcile(cache, body, key)
            burst.append(cpu)
            _schedule(cache, key, desired, free)
            bodies[key] = {**body, "status": desired.status}

    if args.profile_burst:
        burst_profiler = cProfile.Profile()
        burst_profiler.runcall(plan_burst)
        _report("burst (new specs; profiled, slower)", burst)
        pstats.Stats(burst_profiler).sort_stats("tottime").print_stats(args.profile_burst)
    else:
        plan_burst()
        _report("burst (new specs)", burst)
    pods = sum(len(cache.owned.pods_of(k)) for k in bodies)
    print(f"  {pods} pods placed, {sum(1 for f in free.values() if f == 0)} nodes full")

    replan: list[float] = []
    run: Callable[[], None] = lambda: [_replan_all(cache, bodies, replan) for _ in range(args.rounds)]  # noqa: E731
    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(run)
        _report(f"re-plan x{args.rounds} (profiled, slower)", replan)
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(args.profile)
    else:
        run()
        _report(f"re-plan x{args.rounds}", replan)
    if args.split:
        reconciles = len(burst) + len(replan)
        print(
            "steps, CPU per reconcile over both phases: "
            + ", ".join(f"{step} {steps.get(step, 0.0) / reconciles * 1000:.3f} ms" for step in STEPS)
        )
    if args.memory:
        _report_memory()
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    return 0


def _report_memory() -> None:
    snapshot = tracemalloc.take_snapshot()
    by_file = snapshot.statistics("filename")
    for module in ("planning/supply/nodes.py", "planning/placement/candidates.py"):
        held = sum(s.size for s in by_file if s.traceback[0].filename.endswith(module))
        print(f"held by {module}: {held / 1024:.0f} KiB")
    print(f"all traced Python allocations held: {tracemalloc.get_traced_memory()[0] / 2**20:.1f} MiB")


if __name__ == "__main__":
    sys.exit(main())
