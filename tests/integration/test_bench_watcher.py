"""The controller bench's watch (``Watcher`` in benchmarks/controller_bench.py) on the real
apiserver: it lists first, stamps each event when it arrives, goes on from where it was when the
apiserver ends a watch (no event lost or repeated), and ``stop`` ends its thread at once. The
bench's figures rest on these stamps."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from kubernetes import client, config

from tests.bench_module import controller_bench
from tests.harness.cluster import SessionCluster, wait_for

pytestmark = pytest.mark.integration


def test_the_bench_watch_stamps_every_event_once_across_re_opened_watches_and_stops_at_once(
    cluster: SessionCluster, ns: str
) -> None:
    bench = controller_bench()
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    core = client.CoreV1Api(api)
    label = {"bench-watch": "1"}

    def create(name: str) -> float:
        sent = time.monotonic()
        core.create_namespaced_config_map(ns, {"metadata": {"name": name, "labels": label}})
        return sent

    create("before")
    seen: list[tuple[str, str, float]] = []
    lock = threading.Lock()

    def on_event(type_: str, obj: dict[str, Any], now: float) -> None:
        with lock:
            seen.append((type_, obj["metadata"]["name"], now))

    watcher = bench.Watcher(core.list_namespaced_config_map, (ns,), on_event, "bench-watch=1")
    watcher.WATCH_SECONDS = 2  # the apiserver ends each watch after 2 s
    try:
        assert [(t, n) for t, n, _ in seen] == [("ADDED", "before")]  # the list
        watcher.start()
        assert watcher.connected.wait(10)
        sent = create("first")
        wait_for(lambda: any(n == "first" for _, n, _ in seen), 10, "first seen")
        stamped = next(t for _, n, t in seen if n == "first")
        assert sent < stamped < time.monotonic()
        wait_for(lambda: watcher.reopened >= 2, 15, "two watches ended by the apiserver and re-opened")
        create("second")
        core.patch_namespaced_config_map("first", ns, {"data": {"k": "v"}})
        wait_for(lambda: len(seen) >= 4, 10, "second and the change seen")
        time.sleep(2.5)  # one more re-open: nothing is delivered twice
        assert [(t, n) for t, n, _ in seen] == [
            ("ADDED", "before"),
            ("ADDED", "first"),
            ("ADDED", "second"),
            ("MODIFIED", "first"),
        ]
        assert watcher.errors == 0

        watcher.WATCH_SECONDS = 60  # the next watch outlives the test: stop must end it
        opened = watcher.reopened
        wait_for(lambda: watcher.reopened > opened, 10, "a long watch opened")
        time.sleep(0.5)
        stop_at = time.monotonic()
        watcher.stop()
        watcher.join(5)
        assert not watcher.is_alive() and time.monotonic() - stop_at < 2
    finally:
        watcher.stop()
        api.close()
