"""Gateway figures with the real HAProxy on loopback and vLLM emulators on 127.0.0.x.

Usage: .venv/bin/python benchmarks/gateway_bench.py [--rate 100] [--seconds 8]

1. Added latency: the same open-loop request rate sent straight to one emulator and through the
   gateway (API key, per-key limits and body routing on), p50/p99 of each and the difference.
2. Least-connections vs round-robin: three one-at-a-time emulators, one request in twenty decodes
   75x longer; p95 of the short requests under each policy and their ratio.
3. Capacity weights: a GLM-4-9B bf16 32k plan on 2 H100 + 3 L4 nodes from the real planner;
   the proxy weights it gives, and the share of requests each pod gets under 64 concurrent clients
   (emulators hold as many sequences as the plan says).

Prints figures; asserts nothing. Latency on a shared machine is noisy: compare ratios.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from tests.harness.cluster import free_port, repo_root
from tests.harness.gateway_objects import H100, glmdeployment, vllm_pod
from tests.harness.haproxy import LocalGateway
from tests.harness.load import percentile, run_load
from tests.harness.vllm_emulator import LatencyModel, VLLMMetricsEmulator

from glm_operator.gateway.routes import RoutingTable, compute_routing_table
from glm_operator.planning.placement.plan import plan_placement
from glm_operator.planning.placement.request import placement_request_from_spec
from glm_operator.planning.supply.nodes import parse_gpu_pools

MODEL = "glm-4-9b"
KEY = "sk-bench"


def chat(max_tokens: int) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": max_tokens, "messages": [{"role": "user", "content": "hello"}]}


@contextmanager
def gateway(table: RoutingTable, **settings: Any) -> Iterator[LocalGateway]:
    with tempfile.TemporaryDirectory() as workdir:
        keys = Path(workdir) / "keys.map"
        keys.write_text(f"{KEY} bench\n")
        gw = LocalGateway(Path(workdir), keys_file=str(keys), **settings)
        try:
            yield gw.start(table)
        finally:
            gw.stop()


@contextmanager
def emulators(count: int, port: int, **kwargs: Any) -> Iterator[list[VLLMMetricsEmulator]]:
    started = [
        VLLMMetricsEmulator(
            {MODEL: (0, 0)}, port, host=f"127.0.0.{i + 2}", name=f"127.0.0.{i + 2}", **kwargs
        ).start()
        for i in range(count)
    ]
    try:
        yield started
    finally:
        for emulator in started:
            emulator.stop()


def table_for(port: int, variants: list[tuple[str, float]], pods: list[tuple[str, str]]) -> RoutingTable:
    glmd = glmdeployment("bench", MODEL, variants, port=port)
    objects = [vllm_pod(f"pod-{i}", "bench", gpu, ip) for i, (gpu, ip) in enumerate(pods)]
    return compute_routing_table([glmd], objects, slots=8)


@contextmanager
def emulator_process(host: str, port: int, base_seconds: float) -> Iterator[str]:
    """An emulator in its own process (its threads do not share this process's interpreter lock)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.harness.vllm_emulator", "--model", MODEL, "--host", host,
         "--port", str(port), "--base-seconds", str(base_seconds), "--max-seconds", "600"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == str(port).encode()
        yield f"http://{host}:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def added_latency(rate: float, seconds: float) -> None:
    port = free_port()
    count = int(rate * seconds)
    with emulator_process("127.0.0.2", port, 0.005) as direct_url:
        table = table_for(port, [(H100, 10)], [(H100, "127.0.0.2")])
        with gateway(table, requests_per_minute=1_000_000, max_concurrent_requests=1000) as gw:
            run_load(gw.url, [chat(4)] * 50, concurrency=8, api_key=KEY)  # warm up both paths
            run_load(direct_url, [chat(4)] * 50, concurrency=8)
            direct = [r.seconds for r in run_load(direct_url, [chat(4)] * count, concurrency=32, rate=rate)]
            proxied_results = run_load(gw.url, [chat(4)] * count, concurrency=32, rate=rate, api_key=KEY)
            assert all(r.status == 200 for r in proxied_results)
            proxied = [r.seconds for r in proxied_results]
    print(f"1. added latency at {rate:.0f} req/s, {count} requests each way (5 ms service time):")
    for q in (0.5, 0.99):
        d, p = percentile(direct, q), percentile(proxied, q)
        print(
            f"   p{q * 100:.0f}: direct {d * 1000:.2f} ms, via gateway {p * 1000:.2f} ms, "
            f"added {(p - d) * 1000:.2f} ms"
        )


def least_conn_vs_round_robin() -> None:
    port = free_port()
    latency = LatencyModel(base_seconds=0.01, seconds_per_output_token=0.001)
    bodies = [chat(600 if i % 20 == 0 else 8) for i in range(240)]
    p95: dict[str, float] = {}
    with emulators(3, port, latency=latency, max_concurrency=1) as started:
        table = table_for(port, [(H100, 1)], [(H100, e.host) for e in started])
        for balance in ("leastconn", "roundrobin"):
            with gateway(table, balance=balance) as gw:
                results = run_load(gw.url, bodies, concurrency=16, rate=30, api_key=KEY)
            short = [r.seconds for r, b in zip(results, bodies, strict=True) if b["max_tokens"] == 8]
            p95[balance] = percentile(short, 0.95)
    print(
        "2. skewed workload (1 in 20 requests 0.61 s, others 0.018 s; "
        "3 replicas serving one at a time; 30 req/s):"
    )
    print(
        f"   p95 of short requests: leastconn {p95['leastconn'] * 1000:.0f} ms, "
        f"roundrobin {p95['roundrobin'] * 1000:.0f} ms, ratio leastconn/roundrobin "
        f"{p95['leastconn'] / p95['roundrobin']:.2f}"
    )


def mixed_plan_weights() -> None:
    fixture = yaml.safe_load((repo_root() / "tests" / "fixtures" / "gpu-cluster.yaml").read_text())
    nodes = [n for n in fixture["items"] if n["metadata"]["name"].startswith(("h100", "l4"))]
    spec = {
        "model": {"id": "zai-org/GLM-4-9B-0414"},
        "quantization": "bf16",
        "contextLength": 32768,
        "replicas": 20,
        "gpu": {"products": ["H100", "L4"]},
    }
    plan = plan_placement(placement_request_from_spec(spec, parse_gpu_pools(nodes)))
    variants = [(v.gpu_product, v.max_concurrency) for v in plan.variants]
    port = free_port()
    pods = [(H100, "127.0.0.2"), (H100, "127.0.0.3"), (variants[-1][0], "127.0.0.4")]
    table = table_for(port, variants, pods)
    backend = table.backend(MODEL)
    assert backend is not None
    latency = LatencyModel(base_seconds=0.02, seconds_per_output_token=0.001)
    capacity = {gpu: round(c) for gpu, c in variants}
    started = [
        VLLMMetricsEmulator(
            {MODEL: (0, 0)}, port, host=ip, name=ip, latency=latency, max_concurrency=capacity[gpu]
        ).start()
        for gpu, ip in pods
    ]
    try:
        with gateway(table) as gw:
            results = run_load(gw.url, [chat(60)] * 1200, concurrency=64, api_key=KEY)
    finally:
        for emulator in started:
            emulator.stop()
    share = Counter(r.served_by for r in results)
    total_weight = sum(m.weight for m in backend.members)
    print("3. GLM-4-9B bf16 32k on H100 + L4 (real planner):")
    for gpu, concurrency in variants:
        print(f"   plan: {gpu} maxConcurrency {concurrency:.1f}")
    for member, (gpu, ip) in zip(backend.members, pods, strict=True):
        print(
            f"   pod {member.pod} ({gpu}): weight {member.weight}, "
            f"expected share {member.weight / total_weight:.2f}, "
            f"observed {share[ip] / len(results):.2f} ({share[ip]} of {len(results)})"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rate", type=float, default=100.0, help="requests per second for the overhead run")
    parser.add_argument("--seconds", type=float, default=8.0, help="length of the overhead run")
    args = parser.parse_args()
    added_latency(args.rate, args.seconds)
    least_conn_vs_round_robin()
    mixed_plan_weights()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
