"""The operator's plan pages (controller.pages through controller.metrics.app): what a reconcile
planned, served read-only next to /metrics. The WSGI app is called directly (no socket); the
browser test (tests/integration/test_plan_page_browser.py) fetches the same app over loopback."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from glm_operator.api.v1alpha1 import API_VERSION, KIND
from glm_operator.controller import metrics
from glm_operator.controller.config import OperatorConfig
from glm_operator.controller.pages import PlanPages
from tests.harness.controller import reconciling
from tests.harness.fake_api import FakeApi
from tests.harness.plan_dom import expected_from_status, read_plan_dom
from tests.harness.scenarios import BODY, NODES


def get(app: Any, path: str) -> tuple[str, dict[str, str], str]:
    seen: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        seen["status"], seen["headers"] = status, dict(headers)

    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": "", "wsgi.url_scheme": "http"}
    body: Iterable[bytes] = app(environ, start_response)
    return seen["status"], seen["headers"], b"".join(body).decode()


def test_a_reconcile_leaves_its_plan_on_the_metrics_port_until_the_object_goes() -> None:
    api = FakeApi()
    pages = PlanPages()
    r = reconciling(api, OperatorConfig(leader_election=False), NODES, pages=pages)
    r.wired.handlers.on_glmdeployment("ADDED", api.put(copy.deepcopy(BODY)))
    r.reconcile(("llm", "g"))
    app = metrics.app(pages)

    status, headers, html = get(app, "/plans/llm/g")
    assert status == "200 OK" and headers["Content-Type"] == "text/html; charset=utf-8"
    assert headers["Content-Security-Policy"] == "default-src 'none'; style-src 'unsafe-inline'"
    written = api.get_object(API_VERSION, KIND, "llm", "g")
    assert written is not None
    dom, expected = read_plan_dom(html), expected_from_status(written["status"]["plan"])
    assert dom["variants"] == expected["variants"] and dom["license"] == expected["license"] == "MIT"
    assert 'data-fact="phase">Deploying<' in html  # the phase the status says

    status, _, index = get(app, "/plans/")
    assert status == "200 OK" and 'href="/plans/llm/g"' in index
    assert get(app, "/plans/llm/other")[0] == "404 Not Found"
    assert get(app, "/plans/llm/g/extra")[0] == "404 Not Found"
    status, headers, text = get(app, "/metrics")
    assert status.startswith("200") and 'glm_operator_plan_fits{name="g",namespace="llm"} 1.0' in text

    r.wired.handlers.on_glmdeployment("DELETED", written)
    r.reconcile(("llm", "g"))
    assert get(app, "/plans/llm/g")[0] == "404 Not Found"
    assert "No GLMDeployment planned yet" in get(app, "/plans")[2]


def test_without_pages_the_port_serves_only_metrics() -> None:
    status, headers, text = get(metrics.app(None), "/plans/llm/g")
    assert status.startswith("200") and "text/plain" in headers["Content-Type"]
    assert "glm_operator_reconciles_total" in text
