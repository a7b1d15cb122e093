"""Gateway replicas as HAProxy peers (pure): each replica counts in its own per-key table, the
limit checks the sum of every replica's table; the sidecar names the replicas from their pods.
Per-client model allow-lists: from spec.clients into two map files."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from glm_operator.api.gateway import GLMGatewaySpec
from glm_operator.gateway.haproxy_config import (
    GatewaySettings,
    Peer,
    parse_state,
    render_allow_lists,
    render_config,
    render_files,
    render_state,
)
from glm_operator.gateway.objects import gateway_labels
from glm_operator.gateway.routes import Backend, RoutingTable, backend_name
from glm_operator.gateway.sync import GATEWAY_PODS, SyncOptions, gateway_peers, pod_kind, settings_for
from glm_operator.render import names

PEERS = (Peer("llm-gateway-a", "10.0.0.1"), Peer("llm-gateway-b", "10.0.0.2"))


def settings(**changes: Any) -> GatewaySettings:
    base: dict[str, Any] = {
        "config_dir": "/run/g",
        "runtime_socket": "/run/g/admin.sock",
        "keys_file": "/k/keys.map",
        "requests_per_minute": 60,
    }
    return GatewaySettings(**{**base, **changes})


def test_each_replica_writes_its_own_table_and_checks_the_sum() -> None:
    text = render_config(RoutingTable(()), settings(peers=PEERS, local_peer="llm-gateway-a"))
    assert "localpeer llm-gateway-a" in text
    assert "track-sc0 var(txn.client) table per_key_llm-gateway-a" in text
    assert "table_http_req_rate(per_key_llm-gateway-b),add(txn.key_rate)" in text
    assert "table_http_req_rate(per_key_llm-gateway-a)" not in text, "its own counts come from sc0"
    assert "if { var(txn.key_rate) -m int gt 60 }" in text
    assert "peer llm-gateway-a 10.0.0.1:10000" in text and "peer llm-gateway-b 10.0.0.2:10000" in text
    assert text.count(",gpc1_rate(60s) peers gateway") == 2, "both tables are replicated"


def test_without_peers_the_table_is_local_as_before() -> None:
    text = render_config(RoutingTable(()), settings())
    assert "track-sc0 var(txn.client) table per_key\n" in text
    assert "peers" not in text and "localpeer" not in text
    assert "sc_http_req_rate(0) gt 60" in text


def test_peers_survive_the_state_file() -> None:
    s = settings(peers=PEERS, local_peer="llm-gateway-a")
    parsed = parse_state(render_state(RoutingTable(()), s))
    assert parsed is not None and parsed[1] == s


def gateway_pod(name: str, ip: str | None, gateway: str = "llm", **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": gateway_labels(gateway), **meta},
        "status": {"podIP": ip} if ip else {},
    }


def test_the_sidecar_names_every_replica_with_an_address() -> None:
    options = SyncOptions("ns", "llm", "/run/g", None, pod_name="llm-gateway-b", pod_ip="10.0.0.2")
    pods = [
        gateway_pod("llm-gateway-a", "10.0.0.1"),
        gateway_pod("llm-gateway-b", None),  # itself, before its own pod shows the IP
        gateway_pod("llm-gateway-c", None),  # not scheduled yet
        gateway_pod("llm-gateway-d", "10.0.0.4", deletionTimestamp="2026-12-02T00:00:00Z"),
    ]
    assert gateway_peers(pods, options) == PEERS
    spec = GLMGatewaySpec.model_validate({"apiKeys": {"secretName": "k"}})
    assert settings_for(spec, options, PEERS).key_table == "per_key_llm-gateway-b"
    no_name = SyncOptions("ns", "llm", "/run/g", None)
    assert gateway_peers(pods, no_name) == ()
    assert settings_for(spec, no_name).key_table == "per_key"


def test_one_pods_watch_feeds_vllm_pods_and_the_gateways_own() -> None:
    vllm = {"metadata": {"labels": names.common_labels("flash", "h100", "NVIDIA-H100-80GB-HBM3")}}
    assert pod_kind(vllm, "llm") == "pods"
    assert pod_kind(gateway_pod("x", "1.2.3.4"), "llm") == GATEWAY_PODS
    assert pod_kind(gateway_pod("x", "1.2.3.4", gateway="other"), "llm") == "other-pods"


def test_allow_lists_come_from_spec_clients_into_two_map_files() -> None:
    spec = GLMGatewaySpec.model_validate(
        {"apiKeys": {"secretName": "k"}, "clients": [{"name": "team-a", "models": ["glm-flash", "glm-5"]}]}
    )
    s = settings_for(spec, SyncOptions("ns", "llm", "/run/g", "/k/keys.map"))
    assert s.allowed_models == (("team-a", ("glm-flash", "glm-5")),)
    assert render_allow_lists(s) == {
        "restricted-clients.map": "team-a 1\n",
        "allowed-models.map": "team-a/glm-flash 1\nteam-a/glm-5 1\n",
    }
    assert "model_not_allowed" in render_config(RoutingTable(()), s)
    # GET /v1/models of team-a: the served names of its list, in the served order.
    table = RoutingTable(tuple(Backend(m, backend_name(m), ()) for m in ("glm-5", "glm-big", "glm-flash")))
    files = render_files(table, s)
    assert [m["id"] for m in json.loads(files["models-client-0.json"])["data"]] == ["glm-5", "glm-flash"]
    assert (
        "file /run/g/models-client-0.json if METH_GET { path /v1/models } { var(txn.client) -m str team-a }"
        in (files["haproxy.cfg"])
    )
    assert render_allow_lists(settings()) == {} and "model_not_allowed" not in render_config(
        RoutingTable(()), settings()
    )
    parsed = parse_state(render_state(RoutingTable(()), s))
    assert parsed is not None and parsed[1] == s


@pytest.mark.parametrize(
    ("client", "field"),
    [
        ({"name": "team a", "models": ["m"]}, "name"),
        ({"name": "a", "models": []}, "models"),
        ({"name": "a", "models": ["a b"]}, "models"),
    ],
)
def test_bad_clients_name_the_field(client: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        GLMGatewaySpec.model_validate({"apiKeys": {"secretName": "k"}, "clients": [client]})


def test_the_hold_bounds_come_from_spec_scale_from_zero() -> None:
    options = SyncOptions("ns", "llm", "/run/g", None)
    default = settings_for(GLMGatewaySpec.model_validate({"apiKeys": {"secretName": "k"}}), options)
    assert (default.hold_max_requests, default.hold_max_wait_seconds, default.wake_retry_after_seconds) == (
        100,
        300,
        30,
    )
    spec = GLMGatewaySpec.model_validate(
        {"apiKeys": {"secretName": "k"}, "scaleFromZero": {"maxQueuedRequests": 0, "retryAfterSeconds": 120}}
    )
    s = settings_for(spec, options)
    text = render_config(RoutingTable(()), s)
    assert (
        s.hold_max_requests == 0
        and "lua-load" not in text
        and "hold.lua" not in render_files(RoutingTable(()), s)
    )
    assert "hold.lua" in render_files(RoutingTable(()), default)
    with pytest.raises(ValidationError, match="maxWaitSeconds"):
        GLMGatewaySpec.model_validate(
            {"apiKeys": {"secretName": "k"}, "scaleFromZero": {"maxWaitSeconds": 0}}
        )
