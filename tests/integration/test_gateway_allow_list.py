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


def test_v1_models_id_answers_one_served_name(tmp_path: Path) -> None:
    """``GET /v1/models/{id}`` as OpenAI answers it: the model object of a served name (URL-decoded;
    an id may hold '/'), an OpenAI-style 404 for any other, and for a client with an allow-list a
    404 for a served name outside it (as for a name that does not exist)."""
    keys = tmp_path / "keys.map"
    keys.write_text("sk-a team-a\nsk-b team-b\n")
    models = ("glm-5.3-flash[1m]", "glm-big", "zai-org/GLM-4.5-Air")
    served = RoutingTable(tuple(Backend(m, backend_name(m), ()) for m in models))
    allowed = (("team-a", ("glm-big",)),)
    with LocalGateway(tmp_path, keys_file=str(keys), allowed_models=allowed, hold_max_requests=0) as gateway:
        gateway.start(served)

        def get(path: str, key: str | None = "sk-b") -> tuple[int, dict[str, object]]:
            answer = request(gateway.url, path, api_key=key)
            assert answer.headers.get("content-type") == "application/json", answer.headers
            return answer.status, json.loads(answer.body)

        assert get("/v1/models/glm-big") == (
            200,
            {"id": "glm-big", "object": "model", "created": 0, "owned_by": "glm-operator"},
        )
        assert get("/v1/models/glm-5.3-flash%5B1m%5D")[1]["id"] == "glm-5.3-flash[1m]"
        assert get("/v1/models/zai-org/GLM-4.5-Air")[1]["id"] == "zai-org/GLM-4.5-Air"
        status, body = get("/v1/models/glm-9")
        assert status == 404 and body["error"]["code"] == "model_not_found"  # type: ignore[index]
        assert "`glm-9`" in body["error"]["message"]  # type: ignore[index]
        assert get("/v1/models/glm-big", key="sk-a")[0] == 200
        assert get("/v1/models/glm-5.3-flash%5B1m%5D", key="sk-a")[0] == 404
        assert request(gateway.url, "/v1/models/glm-big", api_key="sk-wrong").status == 401
