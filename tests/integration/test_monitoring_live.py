"""Every dashboard query and every alert's signal, run by a real Prometheus, returns series.

Prometheus (Debian's, tests/harness/prometheus.py) scrapes, on loopback:
- the vLLM emulator, which has served a request through the gateway (token counters and latency
  histograms move), labelled like the PodMonitor labels a vLLM pod (namespace, pod);
- the operator's own metrics port (controller.metrics.serve) after the real reconciler has
  reconciled a GLMDeployment on the in-memory API, and after the operator's KV-cache reader
  (controller.kv_cache, as the autoscaler's tick runs it) has read the emulator's
  vllm:cache_config_info from this Prometheus: 20 % fewer tokens than the plan's;
- a real HAProxy configured by the gateway code (its prometheus-exporter frontend) and the gateway
  sync's per-key collector reading that HAProxy's stick table;
- a DCGM-exporter stand-in with two GPUs used by the vLLM pod.

Dashboard variables are replaced by ``.*`` (Grafana's "All") and ``$__rate_interval`` by 30s.
Each alert's full expression must evaluate without error; its ``signal`` (the expression without
the threshold) must return series. Polling waits for scrapes to land; nothing asserts on timing.
"""

from __future__ import annotations

import asyncio
import copy
import json
import threading
import time
import urllib.parse
import urllib.request
import wsgiref.simple_server
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from devtools import alerts, dashboards, series
from prometheus_client import CollectorRegistry, make_wsgi_app

from glm_operator.clients.prometheus import PrometheusQueueClient
from glm_operator.commands.gateway import key_metrics
from glm_operator.controller import metrics
from glm_operator.controller.config import OperatorConfig
from glm_operator.controller.kv_cache import INTERVAL_SECONDS, KVCacheReader
from glm_operator.gateway.routes import compute_routing_table
from tests.harness.clock import ManualClock
from tests.harness.cluster import free_port
from tests.harness.controller import reconciling
from tests.harness.dcgm_exporter import GPU, DCGMExporterStandIn
from tests.harness.fake_api import FakeApi
from tests.harness.gateway_objects import H100, glmdeployment, vllm_pod
from tests.harness.haproxy import LocalGateway
from tests.harness.load import request
from tests.harness.prometheus import PrometheusServer
from tests.harness.scenarios import BODY, NODES
from tests.harness.vllm_emulator import VLLMMetricsEmulator

pytestmark = [pytest.mark.integration, pytest.mark.prometheus]

NAMESPACE = str(BODY["metadata"]["namespace"])
NAME = "live-monitoring"
KEY = "sk-test-alice"
RATE = "30s"
A100 = "NVIDIA-A100-SXM4-80GB"  # a GPU type of the plan; DCGM's modelName is "NVIDIA A100-SXM4-80GB"
BLOCK_SIZE = 16


@dataclass
class Bed:
    prometheus: PrometheusServer
    served_model: str
    reported_kv_tokens: int  # what the emulator's blocks make: 80 % of the H100 variant's plan

    def query(self, expr: str) -> list[dict[str, Any]]:
        url = f"{self.prometheus.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=30) as response:
            answer = json.load(response)
        assert answer["status"] == "success", (expr, answer)
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result


def dashboard_expr(expr: str) -> str:
    for variable in ("$namespace", "$name", "$model_name"):
        expr = expr.replace(variable, ".*")
    return expr.replace("$__rate_interval", RATE)


def label_values_expr(query: str) -> str:
    """``label_values(selector, label)`` as the selector Grafana sends to /api/v1/series."""
    inner = query.removeprefix("label_values(").removesuffix(")")
    return dashboard_expr(inner.rsplit(",", 1)[0])


def serve_registry(registry: CollectorRegistry) -> wsgiref.simple_server.WSGIServer:
    class Quiet(wsgiref.simple_server.WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = wsgiref.simple_server.make_server("127.0.0.1", 0, make_wsgi_app(registry), handler_class=Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    workdir = tmp_path_factory.mktemp("monitoring-live")
    # The operator: the real reconciler plans a GLMDeployment; its metrics port on loopback.
    api = FakeApi()
    r = reconciling(api, OperatorConfig(leader_election=False), NODES)
    body = copy.deepcopy(BODY)
    body["metadata"]["name"] = NAME
    r.wired.handlers.on_glmdeployment("ADDED", api.put(body))
    r.reconcile((NAMESPACE, NAME))
    status = api.get_object(str(BODY["apiVersion"]), str(BODY["kind"]), NAMESPACE, NAME)["status"]
    served = str(status["model"])
    (h100,) = [v for v in status["plan"]["variants"] if v["gpuProduct"] == H100]
    blocks = int(h100["kvCacheTokens"] * 0.8) // BLOCK_SIZE
    metrics.LEADER.set(1)
    metrics.QUEUE_DEPTH.labels(NAMESPACE, NAME).set(0)  # the autoscaler's, when it runs
    metrics.count_autoscaler_decision(NAMESPACE, NAME, "hold")
    operator_port = free_port()
    operator_server = metrics.serve(operator_port, host="127.0.0.1")

    # vLLM (the emulator) behind a real HAProxy configured by the gateway code.
    vllm_port = free_port()
    emulator = VLLMMetricsEmulator({served: (2.0, 3.0)}, vllm_port, name="vllm-0").start()
    emulator.set(served, kv_cache_usage=0.97, preemptions=1)  # a full KV cache: its alert's expression holds
    emulator.set_cache_config(
        num_gpu_blocks=blocks, block_size=BLOCK_SIZE, kv_cache_size_tokens=blocks * BLOCK_SIZE
    )
    # The operator knows the scraped vLLM pod as one of the GLMDeployment's, on H100.
    pod = vllm_pod(f"{NAME}-0", NAME, H100, "127.0.0.1")
    pod["metadata"].update(namespace=NAMESPACE, uid="live-pod-0")
    r.wired.cache.owned.set_pod((NAMESPACE, NAME), pod)
    keys = workdir / "keys.map"
    keys.write_text(f"{KEY} alice\n")
    gateway = LocalGateway(workdir / "gw", keys_file=str(keys), slots=2, health_check_interval_seconds=1)
    (workdir / "gw").mkdir()
    table = compute_routing_table(
        [glmdeployment(NAME, served, [(H100, 8.0)], port=vllm_port)],
        [vllm_pod(f"{NAME}-0", NAME, H100, "127.0.0.1")],
        slots=2,
    )
    gateway.start(table)
    registry = CollectorRegistry()
    registry.register(key_metrics(gateway.runtime))
    sync_server = serve_registry(registry)

    gpus = [
        GPU("gpu-node-1", i, A100.replace("-", " ", 1), namespace=NAMESPACE, pod=f"{NAME}-0",
            utilisation=87, memory_used_mib=79_000, power_watts=550, temperature_celsius=61)
        for i in range(2)
    ]  # fmt: skip
    with DCGMExporterStandIn(gpus) as dcgm:
        prometheus = PrometheusServer(
            workdir,
            [
                (vllm_port, {"namespace": NAMESPACE, "pod": f"{NAME}-0"}),
                (operator_port, {}),
                (gateway.metrics_port, {}),
                (int(sync_server.server_address[1]), {}),
                (dcgm.port, {}),
            ],
        )
        prometheus.start()
        try:
            bed = Bed(prometheus, served, blocks * BLOCK_SIZE)
            # Traffic: answers through the gateway (2xx), one without a key (401).
            wait_for(
                lambda: request(gateway.url, "/v1/chat/completions", chat(served), api_key=KEY).status == 200
            )
            for _ in range(3):
                assert request(gateway.url, "/v1/chat/completions", chat(served), api_key=KEY).status == 200
            assert request(gateway.url, "/v1/chat/completions", chat(served)).status == 401
            # Every target up, and enough scrapes after the traffic for rate() over 30s.
            wait_for(lambda: len(bed.query("up == 1")) == 5)
            wait_for(lambda: bool(bed.query(f"{series.VLLM_GENERATION_TOKENS} > 0")))
            wait_for(
                lambda: bool(bed.query(f"count_over_time({series.GATEWAY_CLIENT_REQUESTS}[{RATE}]) > 3"))
            )
            # The operator reads vLLM's KV-cache size from this Prometheus, which scrapes it back.
            clock = ManualClock()
            reader = KVCacheReader(
                prometheus=PrometheusQueueClient(prometheus.url, retries=0, timeout_seconds=5),
                cache=r.wired.cache,
                clock=clock,
                concurrency=asyncio.Semaphore(1),
            )

            def kv_read() -> bool:
                clock.advance(INTERVAL_SECONDS)
                asyncio.run(reader.tick())
                return bool(bed.query(f'{series.OP_REPORTED_KV}{{name="{NAME}"}}'))

            wait_for(kv_read)
            yield bed
        finally:
            prometheus.stop()
            gateway.stop()
            emulator.stop()
            sync_server.shutdown()
            operator_server.shutdown()
            operator_server.server_close()
            metrics.forget(NAMESPACE, NAME)
            metrics.LEADER.set(0)


def chat(model: str) -> dict[str, object]:
    return {"model": model, "max_tokens": 8, "messages": [{"role": "user", "content": "hello"}]}


def wait_for(condition: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"still not true after {timeout}s: {condition}")
        time.sleep(0.5)


DASHBOARD_QUERIES = [
    pytest.param(query, id=f"{view.uid}:{n}")
    for view in dashboards.VIEWS
    for n, query in enumerate(view.queries())
]
VARIABLES = [
    pytest.param(v.query, id=f"{view.uid}:{v.name}") for view in dashboards.VIEWS for v in view.variables
]


@pytest.mark.parametrize("query", DASHBOARD_QUERIES)
def test_dashboard_query_returns_series(bed: Bed, query: str) -> None:
    assert bed.query(dashboard_expr(query)), query


@pytest.mark.parametrize("query", VARIABLES)
def test_dashboard_variable_has_values(bed: Bed, query: str) -> None:
    assert bed.query(label_values_expr(query)), query


@pytest.mark.parametrize("alert", alerts.ALERTS, ids=lambda a: a.name)
def test_alert_signal_returns_series_and_the_rule_evaluates(bed: Bed, alert: alerts.Alert) -> None:
    assert bed.query(alert.signal), alert.signal
    bed.query(alert.expr)  # evaluates (a quiet test bed: it need not fire)


def test_every_metric_name_is_scraped(bed: Bed) -> None:
    exprs = [a.expr for a in alerts.ALERTS] + [q for view in dashboards.VIEWS for q in view.queries()]
    names = sorted({name for expr in exprs for name in series.metric_names(expr)})
    missing = [name for name in names if not bed.query(f'count({{__name__="{name}"}})')]
    print(f"\n{len(names)} metric names, all scraped: {names}")
    assert not missing


def test_the_deployment_dashboard_joins_vllm_to_the_glmdeployment(bed: Bed) -> None:
    selector = label_values_expr(dashboards.DEPLOYMENT.variables[-1].query.replace('"$name"', f'"{NAME}"'))
    (model,) = bed.query(selector)
    assert model["metric"]["model_name"] == bed.served_model
    (kv,) = bed.query(dashboard_expr(f'max({series.VLLM_KV_CACHE_USAGE}{{model_name=~"$model_name"}})'))
    assert float(kv["value"][1]) == 0.97


def test_the_operator_exports_the_kv_tokens_the_emulator_reports(bed: Bed) -> None:
    """vLLM's blocks x block size, read by the operator through Prometheus, scraped back from the
    operator: one series, of the GPU type the pod was planned for, next to the planned one."""
    (reported,) = bed.query(f'{series.OP_REPORTED_KV}{{namespace="{NAMESPACE}",name="{NAME}"}}')
    assert reported["metric"]["gpu_product"] == H100
    assert float(reported["value"][1]) == bed.reported_kv_tokens
    (planned,) = bed.query(f'{series.OP_PLANNED_KV}{{name="{NAME}",gpu_product="{H100}"}}')
    assert float(reported["value"][1]) / float(planned["value"][1]) == pytest.approx(0.8, abs=1e-3)


FIRING = {
    # vLLM reports 97 % KV-cache usage
    "GLMDeploymentKVCacheFull": {"namespace": NAMESPACE, "pod": f"{NAME}-0"},
    # the DCGM stand-in's A100s hold 79,000 MiB, the plan lets vLLM take 92 % of an 80 GB A100
    # (its B200 variant's larger share does not count for them)
    "GLMGPUMemoryAbovePlan": {
        "namespace": NAMESPACE,
        "pod": f"{NAME}-0",
        "gpu_product": "NVIDIA-A100-SXM4-80GB",
    },
    # no pod runs: desired 1, ready 0
    "GLMDeploymentReplicasNotReady": {"namespace": NAMESPACE, "name": NAME},
    # vLLM reports 80 % of the H100 variant's planned KV tokens (no other GPU type reports any)
    "GLMKVCacheTokensOffPlan": {"namespace": NAMESPACE, "name": NAME, "gpu_product": H100},
}


@pytest.mark.parametrize("alert", alerts.ALERTS, ids=lambda a: a.name)
def test_alert_expressions_hold_exactly_where_the_bed_meets_them(bed: Bed, alert: alerts.Alert) -> None:
    """The full expressions (joins included) on real label sets: those whose condition the test bed
    meets return its series (before `for:`), the others nothing (no 5xx, a leader, a flat queue)."""
    result = bed.query(alert.expr)
    if alert.name in FIRING:
        assert [r["metric"] for r in result] and all(
            FIRING[alert.name].items() <= r["metric"].items() for r in result
        ), result
    else:
        assert result == [], result
