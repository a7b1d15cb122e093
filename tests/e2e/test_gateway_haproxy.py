"""The gateway with the real HAProxy binary on loopback, vLLM emulators on 127.0.0.x as the pods.

The routing table comes from GLMDeployment and Pod objects (as the sync process reads them),
with pod IPs set to loopback addresses. No Kubernetes here: the sync against a real apiserver
is in test_gateway_sync.py. Load is bounded (a few hundred requests, seconds each).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from glm_operator.clients.haproxy import send
from glm_operator.commands.gateway import key_metrics
from glm_operator.gateway.routes import RoutingTable, compute_routing_table
from tests.harness.cluster import free_port
from tests.harness.gateway_objects import H100, L4, glmdeployment, vllm_pod
from tests.harness.haproxy import LocalGateway
from tests.harness.load import Result, percentile, request, run_load
from tests.harness.vllm_emulator import LatencyModel, VLLMMetricsEmulator

AIR = "glm-4.5-air"
FLASH_1M = "glm-5.3-flash[1m]"
KEY = "sk-test-alice"
CHAT = "/v1/chat/completions"


def chat(model: str = AIR, max_tokens: int = 16, **extra: object) -> dict[str, object]:
    return {
        "model": model,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": "hi"}],
        **extra,
    }


@pytest.fixture
def port() -> int:
    """One port for every emulator (they differ by 127.0.0.x address, like pods by IP)."""
    return free_port()


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[LocalGateway]:
    keys = tmp_path / "keys.map"
    keys.write_text(f"# <api key> <client>\n{KEY} alice\nsk-test-bob bob\n")
    gw = LocalGateway(tmp_path, keys_file=str(keys), slots=8, health_check_interval_seconds=1)
    yield gw
    gw.stop()


def emulate(
    emulators: list[VLLMMetricsEmulator], host: str, port: int, models: list[str], **kwargs: object
) -> VLLMMetricsEmulator:
    emulator = VLLMMetricsEmulator({m: (0.0, 0.0) for m in models}, port, host=host, name=host, **kwargs)  # type: ignore[arg-type]
    emulators.append(emulator.start())
    return emulator


def send_in_background(gateway: LocalGateway, count: int) -> tuple[list[Result], list[threading.Thread]]:
    """Start ``count`` chat requests in threads; their results land in the returned list."""
    results: list[Result] = []
    threads = [
        threading.Thread(target=lambda: results.append(request(gateway.url, CHAT, chat(), api_key=KEY)))
        for _ in range(count)
    ]
    for thread in threads:
        thread.start()
    return results, threads


def air_table(
    port: int, pods: list[dict[str, object]], previous: RoutingTable | None = None, *, flash: bool = True
) -> RoutingTable:
    """Routing table of GLMDeployment "air" (H100 13 + L4 3 sequences) and, if ``flash``, "flash-1m"."""
    glmds = [glmdeployment("air", AIR, [(H100, 13.0), (L4, 3.0)], port=port)]
    if flash:
        glmds.append(glmdeployment("flash-1m", FLASH_1M, [(H100, 2.0)], port=port))
    return compute_routing_table(glmds, pods, slots=8, previous=previous.slots() if previous else None)


def test_auth_models_unknown_names_and_long_context_routing(
    gateway: LocalGateway, emulators: list[VLLMMetricsEmulator], port: int
) -> None:
    emulate(emulators, "127.0.0.2", port, [AIR])
    emulate(emulators, "127.0.0.3", port, [FLASH_1M])
    table = air_table(
        port, [vllm_pod("air-0", "air", H100, "127.0.0.2"), vllm_pod("f-0", "flash-1m", H100, "127.0.0.3")]
    )
    gateway.start(table)

    assert request(gateway.url, CHAT, chat()).status == 401
    assert request(gateway.url, CHAT, chat(), api_key="sk-wrong").status == 401
    assert request(gateway.url, "/v1/models", api_key="sk-wrong").status == 401

    listed = request(gateway.url, "/v1/models", api_key=KEY)
    assert listed.status == 200
    assert [m["id"] for m in json.loads(listed.body)["data"]] == [AIR, FLASH_1M]

    unknown = request(gateway.url, CHAT, chat("glm-9"), api_key=KEY)
    assert unknown.status == 404 and b'"code":"model_not_found"' in unknown.body and b"glm-9" in unknown.body

    assert request(gateway.url, CHAT, {"messages": []}, api_key=KEY).status == 400  # no model field
    for _ in range(5):
        assert request(gateway.url, CHAT, chat(), api_key=KEY).served_by == "127.0.0.2"
        long_context = request(gateway.url, CHAT, chat(FLASH_1M), api_key=KEY)
        assert (long_context.status, long_context.served_by) == (200, "127.0.0.3")


def test_body_limit(gateway: LocalGateway, emulators: list[VLLMMetricsEmulator], port: int) -> None:
    emulate(emulators, "127.0.0.2", port, [AIR])
    gateway.with_settings(max_body_bytes=4096)
    gateway.start(air_table(port, [vllm_pod("air-0", "air", H100, "127.0.0.2")]))
    big = chat(messages=[{"role": "user", "content": "x" * 8000}])
    assert request(gateway.url, CHAT, big, api_key=KEY).status == 413
    assert request(gateway.url, CHAT, chat(), api_key=KEY).status == 200


def test_per_key_rate_and_concurrency_limits_return_429_with_retry_after(
    gateway: LocalGateway, emulators: list[VLLMMetricsEmulator], port: int
) -> None:
    emulate(emulators, "127.0.0.2", port, [AIR], latency=LatencyModel(base_seconds=0.5))
    gateway.with_settings(requests_per_minute=20, max_concurrent_requests=3)
    gateway.start(air_table(port, [vllm_pod("air-0", "air", H100, "127.0.0.2")]))

    # 6 at once from one key: at most 3 run, the rest get 429 at once.
    results = run_load(gateway.url, [chat()] * 6, concurrency=6, api_key=KEY)
    statuses = Counter(r.status for r in results)
    assert statuses[200] == 3 and statuses[429] == 3, statuses
    rejected = next(r for r in results if r.status == 429)
    assert rejected.headers.get("retry-after") == "1" and b"concurrency_limit_exceeded" in rejected.body

    # Past 20 requests in a minute the key is refused; another key is not.
    statuses = Counter(
        r.status for r in run_load(gateway.url, [chat(max_tokens=1)] * 20, concurrency=2, api_key=KEY)
    )
    assert statuses[429] >= 6, statuses
    over = request(gateway.url, CHAT, chat(), api_key=KEY)
    assert (
        over.status == 429 and b"rate_limit_exceeded" in over.body and over.headers.get("retry-after") == "3"
    )
    assert request(gateway.url, CHAT, chat(), api_key="sk-test-bob").status == 200

    counters = {c.client: c for c in gateway.runtime.key_counters()}
    assert counters["alice"].requests_total == 27 and counters["alice"].rejected_total >= 10
    assert counters["bob"].requests_total == 1 and counters["bob"].rejected_total == 0

    # The sidecar's per-client metrics read the same table on each scrape.
    families = {f.name: f for f in key_metrics(gateway.runtime).collect()}
    requests = {s.labels["client"]: s.value for s in families["glm_gateway_client_requests"].samples}
    rejected = {s.labels["client"]: s.value for s in families["glm_gateway_client_rejected_requests"].samples}
    assert requests == {"alice": 27, "bob": 1} and rejected["bob"] == 0 and rejected["alice"] >= 10


def test_requests_spread_by_planned_capacity(
    gateway: LocalGateway, emulators: list[VLLMMetricsEmulator], port: int
) -> None:
    """An H100 pod planned for 13 sequences and an L4 pod for 3, under 16 concurrent clients."""
    latency = LatencyModel(base_seconds=0.02, seconds_per_output_token=0.002)
    emulate(emulators, "127.0.0.2", port, [AIR], latency=latency, max_concurrency=13)
    emulate(emulators, "127.0.0.3", port, [AIR], latency=latency, max_concurrency=3)
    table = air_table(
        port, [vllm_pod("h100", "air", H100, "127.0.0.2"), vllm_pod("l4", "air", L4, "127.0.0.3")]
    )
    backend = table.backend(AIR)
    assert backend is not None and [m.weight for m in backend.members] == [13, 3]
    gateway.start(table)

    results = run_load(gateway.url, [chat(max_tokens=40)] * 400, concurrency=16, api_key=KEY)
    assert all(r.status == 200 for r in results)
    share = Counter(r.served_by for r in results)
    h100_share = share["127.0.0.2"] / len(results)
    print(
        f"\nweights h100=13 l4=3 (ideal share {13 / 16:.2f}); "
        f"observed h100 share {h100_share:.2f}: {dict(share)}"
    )
    assert 0.65 <= h100_share <= 0.95, share
    assert share["127.0.0.3"] > 0


def test_least_connections_beats_round_robin_on_a_skewed_workload(
    gateway: LocalGateway, emulators: list[VLLMMetricsEmulator], port: int
) -> None:
    """One request in twenty decodes 75x longer: round-robin queues short requests behind them.

    Each emulator runs one request at a time (a saturated replica), so a short request sent to
    a replica busy with a long one waits for it; least-connections sends it to an idle one.
    """
    latency = LatencyModel(base_seconds=0.01, seconds_per_output_token=0.001)
    for i in range(3):
        emulate(emulators, f"127.0.0.{i + 2}", port, [AIR], latency=latency, max_concurrency=1)
    pods = [vllm_pod(f"p{i}", "air", H100, f"127.0.0.{i + 2}") for i in range(3)]
    gateway.start(air_table(port, pods))
    bodies = [chat(max_tokens=600 if i % 20 == 0 else 8) for i in range(160)]

    def p95_short() -> float:
        results = run_load(gateway.url, bodies, concurrency=16, rate=30, api_key=KEY)
        assert all(r.status == 200 for r in results)
        return percentile(
            [r.seconds for r, b in zip(results, bodies, strict=True) if b["max_tokens"] == 8], 0.95
        )

    least = p95_short()
    gateway.with_settings(balance="roundrobin")
    assert gateway.driver.apply(air_table(port, pods)) == "reload"
    rr = p95_short()
    print(
        f"\np95 short requests: leastconn {least * 1000:.0f} ms, "
        f"roundrobin {rr * 1000:.0f} ms, ratio {least / rr:.2f}"
    )
    assert least < rr


def test_sse_first_byte_is_not_held_back(
    gateway: LocalGateway, emulators: list[VLLMMetricsEmulator], port: int
) -> None:
    """A 1.2 s stream whose first token comes after 0.1 s: the client sees it after ~0.1 s too."""
    emulator = emulate(
        emulators,
        "127.0.0.2",
        port,
        [AIR],
        latency=LatencyModel(base_seconds=0.1, seconds_per_output_token=0.02),
    )
    gateway.start(air_table(port, [vllm_pod("air-0", "air", H100, "127.0.0.2")]))
    body = chat(max_tokens=55, stream=True)
    direct = request(emulator.url, CHAT, body)
    proxied = request(gateway.url, CHAT, body, api_key=KEY)
    assert proxied.status == 200 and proxied.headers["content-type"] == "text/event-stream"
    assert proxied.body.count(b"data: ") == direct.body.count(b"data: ") == 56
    print(
        f"\nSSE first byte: direct {direct.first_byte_seconds * 1000:.0f} ms, "
        f"gateway {proxied.first_byte_seconds * 1000:.0f} ms; whole stream {proxied.seconds:.2f} s"
    )
    assert proxied.seconds > 1.0
    assert proxied.first_byte_seconds < 0.5


def test_members_follow_readiness_without_reload_and_in_flight_requests_finish(
    gateway: LocalGateway, emulators: list[VLLMMetricsEmulator], port: int
) -> None:
    slow = LatencyModel(base_seconds=1.5)
    emulate(emulators, "127.0.0.2", port, [AIR], latency=slow)
    emulate(emulators, "127.0.0.3", port, [AIR], latency=slow)
    emulate(emulators, "127.0.0.4", port, [AIR, FLASH_1M])
    pods = [vllm_pod("a", "air", H100, "127.0.0.2"), vllm_pod("b", "air", H100, "127.0.0.3")]
    table = air_table(port, pods, flash=False)
    gateway.start(table)
    worker = gateway.runtime.process_id()

    in_flight, threads = send_in_background(gateway, 4)
    time.sleep(0.4)
    # Pod a turns unready, pod c joins: runtime commands only, the same worker keeps serving.
    pods = [
        vllm_pod("a", "air", H100, "127.0.0.2", ready=False),
        pods[1],
        vllm_pod("c", "air", H100, "127.0.0.4"),
    ]
    table = air_table(port, pods, previous=table, flash=False)
    assert gateway.driver.apply(table) == "runtime"
    assert gateway.runtime.process_id() == worker
    served = Counter(request(gateway.url, CHAT, chat(), api_key=KEY).served_by for _ in range(6))
    assert served["127.0.0.2"] == 0 and served["127.0.0.4"] > 0, served

    # A new served name needs a new backend: a graceful reload, in-flight requests still finish.
    table = air_table(port, [*pods, vllm_pod("f", "flash-1m", H100, "127.0.0.4")], previous=table)
    assert gateway.driver.apply(table) == "reload"
    assert gateway.runtime.process_id() != worker
    assert request(gateway.url, CHAT, chat(FLASH_1M), api_key=KEY).served_by == "127.0.0.4"
    for thread in threads:
        thread.join(timeout=10)
    assert [r.status for r in in_flight] == [200] * 4


def test_a_killed_upstream_is_taken_out_and_requests_elsewhere_finish(
    gateway: LocalGateway, emulators: list[VLLMMetricsEmulator], port: int, tmp_path: Path
) -> None:
    emulate(emulators, "127.0.0.2", port, [AIR], latency=LatencyModel(base_seconds=1.0))
    victim = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.harness.vllm_emulator",
            "--model",
            AIR,
            "--host",
            "127.0.0.3",
            "--port",
            str(port),
            "--name",
            "victim",
            "--base-seconds",
            "1.0",
            "--max-seconds",
            "120",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert victim.stdout is not None and victim.stdout.readline().strip() == str(port).encode()
        pods = [vllm_pod("a", "air", H100, "127.0.0.2"), vllm_pod("victim", "air", H100, "127.0.0.3")]
        gateway.start(air_table(port, pods))

        results, threads = send_in_background(gateway, 6)
        time.sleep(0.3)
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait(timeout=10)
        for thread in threads:
            thread.join(timeout=10)
        finished = Counter((r.status, r.served_by) for r in results)
        # Requests on the survivor finish; those on the killed pod fail (their server is gone).
        assert finished[(200, "127.0.0.2")] >= 2, finished
        assert sum(n for (status, _), n in finished.items() if status != 200) <= 4

        # New requests all succeed: failed connections are retried elsewhere, then the member is out.
        after = run_load(gateway.url, [chat()] * 8, concurrency=4, api_key=KEY)
        assert [r.status for r in after] == [200] * 8 and {r.served_by for r in after} == {"127.0.0.2"}
        state = send(gateway.settings.runtime_socket, "show servers state")
        victim_line = next(line for line in state.splitlines() if " s2 127.0.0.3 " in line)
        assert victim_line.split()[5] == "0", victim_line  # srv_op_state 0: stopped (down)
    finally:
        if victim.poll() is None:
            os.killpg(victim.pid, signal.SIGKILL)
            victim.wait(timeout=10)


def test_prefix_affinity_raises_the_prefix_cache_hit_rate(
    gateway: LocalGateway, emulators: list[VLLMMetricsEmulator], port: int
) -> None:
    """12 conversations (own system prompt, growing history) over 3 pods, least-conn vs cache-aware."""
    latency = LatencyModel(base_seconds=0.01)
    started = [emulate(emulators, f"127.0.0.{i + 2}", port, [AIR], latency=latency) for i in range(3)]
    pods = [vllm_pod(f"p{i}", "air", H100, f"127.0.0.{i + 2}") for i in range(3)]
    gateway.start(air_table(port, pods))
    bodies = []
    for turn in range(8):
        for conversation in range(12):
            history = [{"role": "system", "content": f"You are assistant number {conversation}. " * 12}]
            for t in range(turn + 1):
                history.append(
                    {"role": "user", "content": f"Question {t} of conversation {conversation}? " * 3}
                )
                if t < turn:
                    history.append({"role": "assistant", "content": f"Answer {t}. " * 10})
            bodies.append({"model": AIR, "max_tokens": 4, "messages": history})

    def hit_rate() -> float:
        before = [e.stats() for e in started]
        results = run_load(gateway.url, bodies, concurrency=6, api_key=KEY)
        assert all(r.status == 200 for r in results), Counter(r.status for r in results)
        after = [e.stats() for e in started]
        hits = sum(
            a["prefix_cache_hits"] - b["prefix_cache_hits"] for a, b in zip(after, before, strict=True)
        )
        queried = sum(
            a["prefix_cache_queries"] - b["prefix_cache_queries"] for a, b in zip(after, before, strict=True)
        )
        return hits / queried

    least = hit_rate()
    for emulator in started:
        emulator.forget_prefixes()
    gateway.with_settings(balance="cache")
    # Measured at once: the old worker still answers what reaches it during the reload (once in CI,
    # before that was fixed, a request here was not a 200; tests/integration/test_gateway_reload.py).
    assert gateway.driver.apply(air_table(port, pods)) == "reload"
    for emulator in started:
        emulator.forget_prefixes()
    affinity = hit_rate()
    print(f"\nprefix-cache hit rate (tokens): leastconn {least:.2f}, cache-aware {affinity:.2f}")
    # A conversation's turn k repeats all of turn k-1's prompt: cache-aware keeps it on the pod that
    # holds it, so most prompt tokens hit (the first turns and each turn's new tail cannot); the
    # load cap spills some. Spreading them without regard to the prefix hits about a third as often
    # on 3 pods. Least-conn is not a reliable baseline on an idle loopback (it keeps choosing the
    # same idle pod, which also hits), so it is reported, not compared.
    assert affinity >= 0.5, (least, affinity)
