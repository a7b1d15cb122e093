"""PrometheusQueueClient against a canned /api/v1/query on loopback (the queue, and the KV-cache
info labels), and the vLLM emulator.

The real-Prometheus test is tests/e2e/test_prometheus_client.py.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from glm_operator.clients.prometheus import (
    DEFAULT_KV_CACHE_QUERY,
    DEFAULT_WAITING_QUERY,
    MetricsUnavailable,
    PrometheusQueueClient,
    QueueSample,
    render_query,
)
from tests.harness.vllm_emulator import VLLMMetricsEmulator

Responder = Callable[[str], tuple[int, Any]]


class FakePrometheus:
    """Answers /api/v1/query with ``responder(query) -> (status, json body)``; records queries."""

    def __init__(self, responder: Responder) -> None:
        self.queries: list[str] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlparse(self.path)
                query = parse_qs(url.query).get("query", [""])[0]
                fake.queries.append(query)
                status, body = responder(query)
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def prometheus() -> Iterator[Callable[[Responder], FakePrometheus]]:
    started: list[FakePrometheus] = []

    def start(responder: Responder) -> FakePrometheus:
        fake = FakePrometheus(responder)
        fake.thread.start()
        started.append(fake)
        return fake

    yield start
    for fake in started:
        fake.server.shutdown()
        fake.server.server_close()


def vector(*values: str, timestamp: float = 1700000000.5) -> dict[str, Any]:
    result = [{"metric": {}, "value": [timestamp, value]} for value in values]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def by_metric(waiting: Any, running: Any) -> Responder:
    def respond(query: str) -> tuple[int, Any]:
        return (200, waiting) if "waiting" in query else (200, running)

    return respond


def test_render_query_fills_placeholders_and_escapes() -> None:
    assert render_query(DEFAULT_WAITING_QUERY, namespace="llm", model="glm-4.5-air") == (
        'sum(vllm:num_requests_waiting{namespace="llm",model_name="glm-4.5-air"})'
    )
    assert render_query('x{m="{model}"}', namespace="n", model='a"b\\c') == 'x{m="a\\"b\\\\c"}'


def test_fetch_reads_both_gauges(prometheus: Callable[[Responder], FakePrometheus]) -> None:
    fake = prometheus(by_metric(vector("12"), vector("32", timestamp=1700000000.0)))
    with PrometheusQueueClient(fake.url) as client:
        sample = client.fetch(namespace="llm", model="glm-4.5-air")
    assert sample == QueueSample(waiting=12.0, running=32.0, timestamp=1700000000.0)
    assert fake.queries == [
        'sum(vllm:num_requests_waiting{namespace="llm",model_name="glm-4.5-air"})',
        'sum(vllm:num_requests_running{namespace="llm",model_name="glm-4.5-air"})',
    ]


def test_custom_templates_and_several_series_are_summed(
    prometheus: Callable[[Responder], FakePrometheus],
) -> None:
    fake = prometheus(by_metric(vector("1", "2", "3"), vector("4")))
    client = PrometheusQueueClient(
        fake.url + "/",
        waiting_query='vllm:num_requests_waiting{kubernetes_namespace="{namespace}",model_name="{model}"}',
        running_query='vllm:num_requests_running{kubernetes_namespace="{namespace}",model_name="{model}"}',
    )
    assert client.fetch(namespace="a", model="b").waiting == 6.0
    assert fake.queries[0] == 'vllm:num_requests_waiting{kubernetes_namespace="a",model_name="b"}'


@pytest.mark.parametrize(
    ("waiting", "status", "match"),
    [
        (vector(), 200, "no series"),
        (vector("NaN"), 200, "NaN"),
        (vector("+Inf"), 200, "Inf"),
        ({"status": "error", "error": "parse error"}, 400, "query failed"),
        ("<html>bad gateway</html>", 200, "unreadable"),
        ({"status": "success", "data": {"resultType": "scalar", "result": [1.0, "3"]}}, 200, "unexpected"),
    ],
)
def test_problems_are_unavailable_never_zero(
    prometheus: Callable[[Responder], FakePrometheus], waiting: Any, status: int, match: str
) -> None:
    fake = prometheus(lambda query: (status, waiting) if "waiting" in query else (200, vector("0")))
    client = PrometheusQueueClient(fake.url, retries=0)
    with pytest.raises(MetricsUnavailable, match=match) as caught:
        client.fetch(namespace="llm", model="glm")
    assert caught.value.query is not None
    assert "waiting" in caught.value.query


def test_prometheus_down_is_unavailable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = PrometheusQueueClient(f"http://127.0.0.1:{port}", retries=0, timeout_seconds=2)
    with pytest.raises(MetricsUnavailable, match="unreachable"):
        client.fetch(namespace="llm", model="glm")


def test_fetch_async(prometheus: Callable[[Responder], FakePrometheus]) -> None:
    fake = prometheus(by_metric(vector("5"), vector("7")))
    sample = asyncio.run(PrometheusQueueClient(fake.url).fetch_async(namespace="n", model="m"))
    assert (sample.waiting, sample.running) == (5.0, 7.0)


def test_emulator_serves_and_changes_gauges() -> None:
    with VLLMMetricsEmulator({"glm-4.5-air": (3, 16)}) as emulator:
        text = urllib.request.urlopen(emulator.url + "/metrics", timeout=5).read().decode()
        assert 'vllm:num_requests_waiting{engine="0",model_name="glm-4.5-air"} 3.0' in text
        assert 'vllm:num_requests_running{engine="0",model_name="glm-4.5-air"} 16.0' in text
        request = urllib.request.Request(
            emulator.url + "/admin/set",
            data=json.dumps({"model": "glm-4.5-air", "waiting": 9}).encode(),
            headers={"Content-Type": "application/json"},
        )
        assert urllib.request.urlopen(request, timeout=5).status == 200
        assert emulator.snapshot() == {"glm-4.5-air": (9.0, 16.0)}
        bad = urllib.request.Request(emulator.url + "/admin/set", data=b"{}")
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(bad, timeout=5)
        assert caught.value.code == 400


def test_kv_cache_info_is_the_label_sets_of_the_models_pods(
    prometheus: Callable[[Responder], FakePrometheus],
) -> None:
    labels = {"__name__": "vllm:cache_config_info", "pod": "p-0", "num_gpu_blocks": "10", "block_size": "16"}
    answers = {
        "n": {"status": "success", "data": {"resultType": "vector", "result": [
            {"metric": labels, "value": [1700000000.0, "1"]}]}},
        "empty": vector(),
        "bad": {"status": "success", "data": {"resultType": "vector", "result": [{"value": [1, "1"]}]}},
    }  # fmt: skip
    fake = prometheus(lambda query: (200, answers[query.split('namespace="')[1].split('"')[0]]))
    client = PrometheusQueueClient(fake.url, retries=0)
    assert client.fetch_kv_cache_info(namespace="n", model="glm") == [labels]
    assert fake.queries == [render_query(DEFAULT_KV_CACHE_QUERY, namespace="n", model="glm")]
    assert fake.queries[0] == (
        'vllm:cache_config_info{namespace="n"} and on (namespace, pod) '
        'vllm:num_requests_running{namespace="n",model_name="glm"}'
    )
    assert asyncio.run(client.fetch_kv_cache_info_async(namespace="empty", model="glm")) == []  # no error
    with pytest.raises(MetricsUnavailable, match="unexpected series"):
        client.fetch_kv_cache_info(namespace="bad", model="glm")
    custom = PrometheusQueueClient(fake.url, kv_cache_query='vllm:cache_config_info{namespace="{namespace}"}')
    assert custom.fetch_kv_cache_info(namespace="n", model="glm") == [labels]
    assert fake.queries[-1] == 'vllm:cache_config_info{namespace="n"}'


def test_emulator_reports_its_kv_cache_size_as_vllm_does() -> None:
    """One vllm:cache_config_info per emulator (one engine), without model_name, its KV-cache size
    in labels; changed in process or through /admin/set."""
    with VLLMMetricsEmulator({"glm-4.5-air": (0, 0), "other": (0, 0)}) as emulator:

        def info_lines() -> list[str]:
            text = urllib.request.urlopen(emulator.url + "/metrics", timeout=5).read().decode()
            return [line for line in text.splitlines() if line.startswith("vllm:cache_config_info{")]

        (line,) = info_lines()
        assert 'num_gpu_blocks="2048"' in line and 'block_size="16"' in line and line.endswith("} 1.0")
        assert "model_name" not in line
        emulator.set_cache_config(num_gpu_blocks=100, block_size=32)
        (line,) = info_lines()
        assert 'num_gpu_blocks="100"' in line and 'kv_cache_size_tokens="None"' in line
        request = urllib.request.Request(
            emulator.url + "/admin/set",
            data=json.dumps({"model": "glm-4.5-air", "num_gpu_blocks": 7, "block_size": 16}).encode(),
        )
        assert urllib.request.urlopen(request, timeout=5).status == 200
        (line,) = info_lines()
        assert 'num_gpu_blocks="7"' in line and 'block_size="16"' in line
