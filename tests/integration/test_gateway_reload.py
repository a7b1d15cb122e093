"""Requests across a graceful reload of the real HAProxy (a served name added): every one is a 200.

A master-CLI reload starts a new worker on the same listening sockets and soft-stops the old one,
which still answers what reached it: the request it is reading, and the next request of each idle
keep-alive connection (``option idle-close-on-response``; without it the old worker closes them
under clients that may be sending). Once stopping, the old worker sees ``nbsrv`` 0 in every
backend (its proxies are stopped), so the "no replica" 503 must not apply there. Emulators on
127.0.0.x are the pods; everything on loopback.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from glm_operator.clients.haproxy import send
from glm_operator.gateway.routes import Backend, Member, RoutingTable, backend_name
from tests.harness.cluster import free_port, wait_for
from tests.harness.haproxy import LocalGateway
from tests.harness.load import Result, request
from tests.harness.vllm_emulator import VLLMMetricsEmulator

pytestmark = pytest.mark.integration
CHAT = "/v1/chat/completions"
MODELS = ["glm-4.5-air", *(f"glm-extra-{i}" for i in range(6))]
HOSTS = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]


def table(port: int, models: int) -> RoutingTable:
    """The first ``models`` served names, each on every emulator."""
    return RoutingTable(
        tuple(
            Backend(
                model,
                backend_name(model),
                tuple(Member(i + 1, f"{model}-{i}", host, port, 1, True) for i, host in enumerate(HOSTS)),
            )
            for model in MODELS[:models]
        )
    )


def chat() -> dict[str, object]:
    return {"model": MODELS[0], "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def port() -> Iterator[int]:
    """One port for every emulator (they differ by 127.0.0.x address, like pods by IP)."""
    port = free_port()
    emulators = [
        VLLMMetricsEmulator({m: (0.0, 0.0) for m in MODELS}, port, host=host, name=host).start()
        for host in HOSTS
    ]
    yield port
    for emulator in emulators:
        emulator.stop()


def test_the_old_worker_answers_the_requests_it_holds(tmp_path: Path, port: int) -> None:
    """A request half read and an idle keep-alive connection, both in the old worker at the reload."""
    with LocalGateway(tmp_path) as gateway:
        gateway.start(table(port, 1))
        idle = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=30)
        assert request(gateway.url, CHAT, chat(), connection=idle).status == 200
        reading = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=30)
        assert request(gateway.url, CHAT, chat(), connection=reading).status == 200
        body = json.dumps(chat()).encode()
        reading.putrequest("POST", CHAT)
        reading.putheader("Content-Type", "application/json")
        reading.putheader("Content-Length", str(len(body)))
        reading.endheaders(body[:10])  # the frontend waits for the whole body (http-buffer-request)
        wait_for(
            lambda: "fe=openai" in send(gateway.settings.runtime_socket, "show sess") or None,
            timeout=10,
            what="the old worker reading the request",
        )

        assert gateway.driver.apply(table(port, 2)) == "reload"
        reading.send(body[10:])
        answer = reading.getresponse()
        data = answer.read()
        assert answer.status == 200, data  # was a 503 "No replica of this model is ready"
        after = request(gateway.url, CHAT, chat(), connection=idle)
        assert after.status == 200, after.body  # was a 599: closed by the old worker


def test_requests_sent_across_reloads_are_all_answered(tmp_path: Path, port: int) -> None:
    """Three clients keeping their connection and three opening one a request send requests while
    the gateway reloads five times (each adds a served name): every answer is a 200."""
    results: list[Result] = []
    done = threading.Event()

    def sent(more: int) -> Callable[[], bool | None]:
        target = len(results) + more
        return lambda: len(results) >= target or None

    with LocalGateway(tmp_path) as gateway:
        gateway.start(table(port, 1))

        def client(keep_alive: bool) -> None:
            connection = (
                http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=30) if keep_alive else None
            )
            while not done.is_set():
                results.append(request(gateway.url, CHAT, chat(), connection=connection))

        clients = [threading.Thread(target=client, args=(i % 2 == 0,)) for i in range(6)]
        for thread in clients:
            thread.start()
        try:
            for models in range(2, 7):
                wait_for(sent(30), timeout=30, what="requests before the reload")
                assert gateway.driver.apply(table(port, models)) == "reload"
            wait_for(sent(30), timeout=30, what="requests after the last reload")
        finally:
            done.set()
            for thread in clients:
                thread.join(timeout=60)
    statuses = Counter(r.status for r in results)
    failed = {r.status: r.body[:200] for r in results if r.status != 200}
    assert set(statuses) == {200}, (statuses, failed)


def test_a_failed_reload_is_retried_by_the_next_apply(tmp_path: Path, port: int) -> None:
    """The master CLI away when a served name is added: the files are written, the reload fails. The
    sync loop applies the same table again; that must reload although the files on disk are current."""
    with LocalGateway(tmp_path) as gateway:
        gateway.start(table(port, 1))
        master = gateway.runtime.master_socket
        gateway.runtime.master_socket = str(tmp_path / "away.sock")
        with pytest.raises(OSError):
            gateway.driver.apply(table(port, 2))
        gateway.runtime.master_socket = master
        second = {**chat(), "model": MODELS[1]}
        assert request(gateway.url, CHAT, second).status != 200  # HAProxy still runs the old config

        assert gateway.driver.apply(table(port, 2)) == "reload"
        answer = request(gateway.url, CHAT, second)
        assert answer.status == 200, answer.body
        assert gateway.driver.apply(table(port, 2)) == "none"  # owed no more
