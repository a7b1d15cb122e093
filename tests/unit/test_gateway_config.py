"""HAProxy configuration of the gateway: rendered text (tests/integration/test_haproxy_check.py has
the real ``haproxy -c`` check it)."""

from __future__ import annotations

import json
from pathlib import Path

from glm_operator.clients.haproxy import parse_table
from glm_operator.gateway.haproxy_config import (
    GatewaySettings,
    needs_reload,
    parse_state,
    render_files,
    render_models_json,
    render_models_map,
    render_state,
    retry_after_commands,
    runtime_commands,
)
from glm_operator.gateway.routes import RoutingTable, compute_routing_table
from tests.harness.gateway_objects import H100, L4, glmdeployment, vllm_pod

GLMDS = [
    glmdeployment("air", "glm-4.5-air", [(H100, 13.0), (L4, 3.0)]),
    glmdeployment("flash-1m", "glm-5.3-flash[1m]", [(H100, 2.0)]),
]
PODS = [
    vllm_pod("air-h100-0", "air", H100, "10.0.0.1"),
    vllm_pod("air-l4-0", "air", L4, "10.0.0.2", ready=False),
    vllm_pod("flash-0", "flash-1m", H100, "fd00::5"),
]


def _table(pods: list[dict[str, object]] = PODS, previous: RoutingTable | None = None) -> RoutingTable:
    return compute_routing_table(GLMDS, pods, slots=4, previous=previous.slots() if previous else None)


def _settings(tmp_path: Path, **changes: object) -> GatewaySettings:
    keys = tmp_path / "keys.map"
    keys.write_text("# api key, client name\nsk-test-1 team-a\n")
    values: dict[str, object] = {
        "config_dir": str(tmp_path),
        "runtime_socket": str(tmp_path / "admin.sock"),
        "keys_file": str(keys),
        "requests_per_minute": 600,
        "max_concurrent_requests": 32,
    }
    return GatewaySettings(**{**values, **changes})  # type: ignore[arg-type]


def test_config_carries_members_weights_limits_and_timeouts(tmp_path: Path) -> None:
    text = render_files(_table(), _settings(tmp_path, read_timeout_seconds=900))["haproxy.cfg"]
    assert "balance leastconn" in text
    assert "server s1 10.0.0.1:8000 weight 13\n" in text
    assert "server s2 10.0.0.2:8000 weight 3 disabled\n" in text  # not ready: no traffic
    assert "server s1 [fd00::5]:8000 weight 2\n" in text
    assert "timeout server 900s" in text
    assert "gt 20971520" in text  # body limit
    assert "sc_http_req_rate(0) gt 600" in text and "Retry-After 1 " in text
    assert "sc_trackers(0) gt 32" in text
    assert "fall 2" in text and "downinter 10s" in text and "error-limit 2 on-error mark-down" in text


def test_models_map_and_list(tmp_path: Path) -> None:
    table = _table()
    assert render_models_map(table).splitlines() == [
        f"glm-4.5-air {table.backends[0].name}",
        f"glm-5.3-flash[1m] {table.backends[1].name}",
    ]
    listed = json.loads(render_models_json(table))
    assert [m["id"] for m in listed["data"]] == ["glm-4.5-air", "glm-5.3-flash[1m]"]


def test_pod_readiness_changes_are_runtime_commands_without_reload() -> None:
    before = _table()
    pods = [
        vllm_pod("air-h100-0", "air", H100, "10.0.0.1", terminating=True),
        vllm_pod("air-l4-0", "air", L4, "10.0.0.2"),
        vllm_pod("air-l4-1", "air", L4, "10.0.0.3"),
        PODS[2],
    ]
    after = _table(pods, previous=before)
    assert not needs_reload(before, after)
    name = before.backends[0].name
    assert runtime_commands(before, after) == [
        f"set server {name}/s1 state maint",
        f"set server {name}/s2 state ready",
        f"set server {name}/s2 health up",
        f"set server {name}/s3 addr 10.0.0.3 port 8000",
        f"set server {name}/s3 weight 3",
        f"set server {name}/s3 state ready",
        f"set server {name}/s3 health up",
    ]
    assert runtime_commands(after, after) == []


def test_a_new_pod_in_a_reused_slot_is_taken_out_before_its_address_changes() -> None:
    before = _table([vllm_pod("old", "air", H100, "10.0.0.1")])
    after = _table([vllm_pod("new", "air", H100, "10.0.0.9")], previous=before)
    name = before.backends[0].name
    assert runtime_commands(before, after)[:2] == [
        f"set server {name}/s1 state maint",
        f"set server {name}/s1 addr 10.0.0.9 port 8000",
    ]


def test_a_new_model_needs_a_reload() -> None:
    one = compute_routing_table(GLMDS[:1], PODS, slots=4)
    assert needs_reload(None, one) and needs_reload(one, _table())


def test_parse_stick_table() -> None:
    text = (
        "# table: per_key, type: string, size:102400, used:2\n"
        "0x55d0: key=team-a use=3 exp=598421 gpc0=2 http_req_cnt=12 http_req_rate(60000)=7\n"
        "0x55d1: key=team-b use=0 exp=599526 gpc0=0 http_req_cnt=4 http_req_rate(60000)=4\n"
    )
    entries = parse_table(text)
    assert [
        (e.client, e.concurrent_requests, e.requests_total, e.request_rate_per_minute, e.rejected_total)
        for e in entries
    ] == [("team-a", 3, 12, 7, 2), ("team-b", 0, 4, 4, 0)]


def test_state_file_round_trips_so_a_restarted_sync_resumes_without_reload(tmp_path: Path) -> None:
    table, settings = _table(), _settings(tmp_path)
    assert parse_state(render_state(table, settings)) == (table, settings)
    assert parse_state("{not json") is None


def test_retry_after_is_the_expected_wake_up_of_each_model(tmp_path: Path) -> None:
    """``status.autoscaler.wakeUpSeconds`` of the GLMDeployment is its backend's Retry-After (rounded
    up); a model never measured gets the configured seconds; a new estimate is a ``set map``."""
    measured = {**GLMDS[0], "status": {**GLMDS[0]["status"], "autoscaler": {"wakeUpSeconds": 41.2}}}
    table = compute_routing_table([measured, GLMDS[1]], PODS, slots=4)
    air, flash = table.backends
    assert (air.wake_up_seconds, flash.wake_up_seconds) == (41.2, None)
    settings = _settings(tmp_path, wake_retry_after_seconds=30)
    files = render_files(table, settings)
    assert files["retry-after.map"] == f"{air.name} 42\n{flash.name} 30\n"
    assert f"map({tmp_path}/retry-after.map,30)" in files["haproxy.cfg"]
    assert "hdr Retry-After %[var(txn.retry_after)]" in files["haproxy.cfg"]
    assert parse_state(files["state.json"]) == (table, settings)

    faster = {**measured, "status": {**measured["status"], "autoscaler": {"wakeUpSeconds": 0.4}}}
    after = compute_routing_table([faster, GLMDS[1]], PODS, slots=4, previous=table.slots())
    assert not needs_reload(table, after)
    map_path = tmp_path / "retry-after.map"
    assert retry_after_commands(table, after, settings) == [f"set map {map_path} {air.name} 1"]
    assert retry_after_commands(after, after, settings) == []


def test_two_glmdeployments_of_one_name_retry_after_the_sooner_wake_up() -> None:
    slow = {**GLMDS[0], "status": {**GLMDS[0]["status"], "autoscaler": {"wakeUpSeconds": 300}}}
    quick = {
        **GLMDS[0],
        "metadata": {"name": "air-2"},
        "status": {**GLMDS[0]["status"], "autoscaler": {"wakeUpSeconds": 20, "coldStartSeconds": 18}},
    }
    broken = {**GLMDS[1], "status": {**GLMDS[1]["status"], "autoscaler": {"wakeUpSeconds": "soon"}}}
    table = compute_routing_table([slow, quick, broken], PODS, slots=4)
    assert [b.wake_up_seconds for b in table.backends] == [20.0, None]
