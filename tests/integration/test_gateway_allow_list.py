"""Per-client model allow-lists on a real HAProxy (loopback): a client with a list gets an
OpenAI-style 403 ``model_not_allowed`` for any other model; its listed model passes on to routing;
a client without a list is not limited by it. ``GET /v1/models`` lists for each client the
served names it may call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from glm_operator.gateway.routes import Backend, RoutingTable, backend_name
from tests.harness.haproxy import LocalGateway
from tests.harness.load import request

pytestmark = pytest.mark.integration
CHAT = "/v1/chat/completions"


def chat(model: str) -> dict[str, object]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}]}


def test_a_client_calls_only_the_models_of_its_list(tmp_path: Path) -> None:
    keys = tmp_path / "keys.map"
    keys.write_text("sk-a team-a\nsk-b team-b\n")
    served = RoutingTable(tuple(Backend(m, backend_name(m), ()) for m in ("glm-flash", "glm-big")))
    allowed = (("team-a", ("glm-flash",)),)
    with LocalGateway(tmp_path, keys_file=str(keys), allowed_models=allowed, hold_max_requests=0) as gateway:
        gateway.start(served)
        refused = request(gateway.url, CHAT, chat("glm-big"), api_key="sk-a")
        assert refused.status == 403
        error = json.loads(refused.body)["error"]
        assert error["code"] == "model_not_allowed" and "`glm-big`" in error["message"]
        assert "spec.clients[].models" in error["message"]
        # Its own model goes on to routing (no pod serves it here and nothing is held: 503).
        assert request(gateway.url, CHAT, chat("glm-flash"), api_key="sk-a").status == 503
        # team-b has no list: every model.
        assert request(gateway.url, CHAT, chat("glm-big"), api_key="sk-b").status == 503
        assert request(gateway.url, CHAT, chat("glm-none"), api_key="sk-b").status == 404


def test_v1_models_lists_only_the_models_a_client_may_call(tmp_path: Path) -> None:
    keys = tmp_path / "keys.map"
    keys.write_text("sk-a team-a\nsk-b team-b\nsk-c team-c\n")
    served = RoutingTable(tuple(Backend(m, backend_name(m), ()) for m in ("glm-big", "glm-flash", "glm-mid")))
    # team-c may call a name no GLMDeployment serves: it is not listed (RoutesResolved says why).
    allowed = (("team-a", ("glm-mid", "glm-flash")), ("team-c", ("glm-gone",)))
    with LocalGateway(tmp_path, keys_file=str(keys), allowed_models=allowed, hold_max_requests=0) as gateway:
        gateway.start(served)

        def listed(key: str) -> list[str]:
            answer = request(gateway.url, "/v1/models", api_key=key)
            assert answer.status == 200 and answer.headers["content-type"] == "application/json"
            return [m["id"] for m in json.loads(answer.body)["data"]]

        assert listed("sk-a") == ["glm-flash", "glm-mid"]
        assert listed("sk-b") == ["glm-big", "glm-flash", "glm-mid"], "no list: every served name"
        assert listed("sk-c") == []
        assert request(gateway.url, "/v1/models", api_key="sk-x").status == 401
