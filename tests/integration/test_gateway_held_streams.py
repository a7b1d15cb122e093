"""A held ``"stream": true`` request on the real HAProxy: ``200 text/event-stream`` at once, an SSE
comment every keep-alive interval while no replica is ready, then the model's answer relayed as it
comes (hold.lua's service sends the request through the gateway's held_streams frontend and never
buffers the answer). Past the wait the stream ends with an OpenAI error event; a full queue answers
503 with Retry-After before any byte of a stream.

Two kinds of upstream: the vLLM emulator (HTTP/1.0, a stream ended by the close) and a small
HTTP/1.1 server sending the stream in chunks, as vLLM's uvicorn does. Everything on loopback.
"""

from __future__ import annotations

import http.client
import itertools
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from glm_operator.gateway.haproxy_config import WAKE_TABLE
from glm_operator.gateway.routes import Backend, Member, RoutingTable, backend_name
from tests.harness.cluster import wait_for
from tests.harness.haproxy import LocalGateway
from tests.harness.load import request
from tests.harness.vllm_emulator import LatencyModel, VLLMMetricsEmulator

pytestmark = pytest.mark.integration
CHAT = "/v1/chat/completions"
MODEL = "glm-flash"
NAME = backend_name(MODEL)
AT_ZERO = RoutingTable((Backend(MODEL, NAME, ()),))
KEEPALIVE = b": waiting for a replica"
TOKENS, SECONDS_PER_TOKEN = 5, 0.25


def ready_at(port: int) -> RoutingTable:
    return RoutingTable((Backend(MODEL, NAME, (Member(1, "flash-0", "127.0.0.1", port, 1, True),)),))


def stream_body(**extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "stream": True, "max_tokens": TOKENS, "messages": [], **extra}


@dataclass
class Stream:
    """One streamed answer as the client saw it: status, headers, (seconds, line) of each line."""

    started: float = 0.0  # time.monotonic() when the request was sent
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    lines: list[tuple[float, bytes]] = field(default_factory=list)

    def data(self) -> list[tuple[float, bytes]]:
        return [(t, line) for t, line in self.lines if line.startswith(b"data: ")]

    def comments_before_data(self) -> list[float]:
        first = self.data()[0][0] if self.data() else float("inf")
        return [t for t, line in self.lines if line == KEEPALIVE and t < first]


def read_stream(port: int, body: dict[str, Any], into: Stream) -> None:
    started = into.started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", CHAT, body=json.dumps(body), headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        into.status, into.headers = response.status, {k.lower(): v for k, v in response.getheaders()}
        while line := response.readline():
            if line.strip():
                into.lines.append((time.monotonic() - started, line.rstrip(b"\r\n")))
    finally:
        conn.close()


def in_background(port: int, body: dict[str, Any]) -> tuple[Stream, threading.Thread]:
    stream = Stream()
    thread = threading.Thread(target=read_stream, args=(port, body, stream), daemon=True)
    thread.start()
    return stream, thread


class ChunkedSSE:
    """An HTTP/1.1 model server streaming in chunks (as vLLM behind uvicorn); /health for checks."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                pieces = [f"t{i} " for i in range(int(body["max_tokens"]))] + ["[DONE]"]
                for index, piece in enumerate(pieces):
                    payload = (
                        piece
                        if piece == "[DONE]"
                        else json.dumps({"choices": [{"delta": {"content": piece}}]})
                    )
                    event = f"data: {payload}\n\n".encode()
                    self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
                    self.wfile.flush()
                    if index + 1 < len(pieces) - 1:
                        time.sleep(SECONDS_PER_TOKEN)
                self.wfile.write(b"0\r\n\r\n")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(params=["http1.0-close", "http1.1-chunked"])
def model_port(request: pytest.FixtureRequest) -> Iterator[int]:
    if request.param == "http1.0-close":
        emulator = VLLMMetricsEmulator(
            {MODEL: (0.0, 0.0)}, latency=LatencyModel(seconds_per_output_token=SECONDS_PER_TOKEN)
        ).start()
        yield emulator.port
        emulator.stop()
    else:
        server = ChunkedSSE()
        yield server.port
        server.stop()


def test_a_held_stream_gets_keepalive_comments_then_the_answer_as_it_comes(
    tmp_path: Path, model_port: int
) -> None:
    with LocalGateway(tmp_path, hold_keepalive_seconds=1, health_check_interval_seconds=30) as gateway:
        gateway.start(AT_ZERO)
        stream, thread = in_background(gateway.port, stream_body())
        wait_for(lambda: len(stream.lines) >= 3 or None, timeout=20, what="three keep-alive comments")
        assert stream.status == 200 and stream.headers["content-type"] == "text/event-stream"
        assert stream.data() == [], "nothing but comments before a replica is ready"

        became_ready = time.monotonic()
        assert gateway.driver.apply(ready_at(model_port)) == "runtime"
        thread.join(timeout=60)
        assert not thread.is_alive()
        comments = stream.comments_before_data()
        assert len(comments) >= 3 and all(0.5 < b - a < 2.5 for a, b in itertools.pairwise(comments)), (
            comments
        )
        data = stream.data()
        assert [line for _, line in data][-1] == b"data: [DONE]"
        assert [json.loads(line[6:])["choices"][0]["delta"]["content"] for _, line in data[:-1]] == [
            f"t{i} " for i in range(TOKENS)
        ]
        # Relayed as it comes: the tokens arrive over the (TOKENS - 1) pauses, not all at the end.
        spread = data[-2][0] - data[0][0]
        assert spread >= 0.5 * (TOKENS - 1) * SECONDS_PER_TOKEN, data
        # Marked healthy with its slot: no wait for the next active check (30 s here).
        assert stream.started + data[0][0] - became_ready < 2.5


def test_a_held_stream_past_the_wait_ends_with_an_error_event_and_a_full_queue_gets_503(
    tmp_path: Path,
) -> None:
    with LocalGateway(
        tmp_path, hold_max_requests=1, hold_max_wait_seconds=3, hold_keepalive_seconds=1
    ) as gateway:
        gateway.start(RoutingTable((Backend(MODEL, NAME, (), wake_up_seconds=12.3),)))
        stream, thread = in_background(gateway.port, stream_body())
        wait_for(lambda: stream.lines or None, timeout=20, what="the first comment")

        # The queue (1) is full: a second stream is answered 503 before any byte of a stream.
        full = request(gateway.url, CHAT, stream_body())
        assert full.status == 503 and full.headers.get("retry-after") == "13", full
        error = json.loads(full.body)["error"]
        assert error["code"] == "model_not_ready" and "retry after 13 seconds" in error["message"]

        thread.join(timeout=30)
        assert stream.status == 200 and len(stream.comments_before_data()) >= 2
        (last,) = stream.data()
        error = json.loads(last[1][6:])["error"]
        assert error["code"] == "model_not_ready" and "retry after 13 seconds" in error["message"]
        assert 2.5 < last[0] < 10, "held for the wait (3 s), then ended"
        assert any(e.requests_total >= 2 for e in gateway.runtime.key_counters(WAKE_TABLE)), "reported"


def test_an_error_answer_of_the_model_becomes_one_error_event(tmp_path: Path) -> None:
    emulator = VLLMMetricsEmulator({MODEL: (0.0, 0.0)}).start()
    try:
        with LocalGateway(tmp_path, hold_keepalive_seconds=1) as gateway:
            gateway.start(AT_ZERO)
            stream, thread = in_background(gateway.port, stream_body(max_tokens="many"))
            wait_for(lambda: stream.lines or None, timeout=20, what="the first comment")
            gateway.driver.apply(ready_at(emulator.port))
            thread.join(timeout=30)
            (event,) = stream.data()
            assert json.loads(event[1][6:])["error"]["code"] == "bad_request"
    finally:
        emulator.stop()


def test_a_stream_with_a_ready_replica_is_not_held(tmp_path: Path) -> None:
    emulator = VLLMMetricsEmulator({MODEL: (0.0, 0.0)}).start()
    try:
        with LocalGateway(tmp_path, hold_keepalive_seconds=1) as gateway:
            gateway.start(ready_at(emulator.port))
            stream = Stream()
            read_stream(gateway.port, stream_body(), stream)
            assert stream.status == 200 and stream.headers.get("x-served-by") == emulator.name
            assert not any(line == KEEPALIVE for _, line in stream.lines)
    finally:
        emulator.stop()
