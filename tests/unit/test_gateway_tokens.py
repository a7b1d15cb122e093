"""The per-key tokens-per-minute limit in the rendered gateway (pure): usage.lua counts each
answer's tokens into gpc1 of the key's entry, the frontend checks gpc1_rate (summed over the
replicas' tables with peers) and answers 429 with Retry-After; without the limit nothing of it
is rendered but the table's columns."""

from __future__ import annotations

from typing import Any

from glm_operator.clients.haproxy import parse_table
from glm_operator.gateway.haproxy_config import (
    BYTES_PER_TOKEN,
    KEY_COUNTERS,
    USAGE_LUA_FILE,
    GatewaySettings,
    Peer,
    render_files,
)
from glm_operator.gateway.routes import RoutingTable

PEERS = (Peer("gw-a", "10.0.0.1"), Peer("gw-b", "10.0.0.2"), Peer("gw-c", "10.0.0.3"))


def files(**changes: Any) -> dict[str, str]:
    base: dict[str, Any] = {
        "config_dir": "/run/g",
        "runtime_socket": "/run/g/admin.sock",
        "keys_file": "/k/keys.map",
        "tokens_per_minute": 5000,
    }
    return render_files(RoutingTable(()), GatewaySettings(**{**base, **changes}))


def test_answers_are_counted_by_the_usage_filter() -> None:
    rendered = files()
    text = rendered["haproxy.cfg"]
    assert "lua-load-per-thread /run/g/usage.lua" in text and "    filter lua.usage\n" in text
    # In the client-facing frontend only: a held stream's inner request is not counted twice.
    assert text.count("filter lua.usage") == 1
    lua = rendered[USAGE_LUA_FILE]
    assert 'core.register_filter("usage"' in lua and "sc_inc_gpc1(0)" in lua
    assert f"local BYTES_PER_TOKEN = {BYTES_PER_TOKEN}\n" in lua
    assert "http-request set-var(txn.request_bytes) req.hdr_val(content-length)" in text


def test_a_key_at_its_limit_gets_429_with_retry_after() -> None:
    text = files()["haproxy.cfg"]
    assert "http-request set-var(txn.key_tokens) sc_gpc1_rate(0)\n" in text
    over = "if { var(txn.key_tokens) -m int ge 5000 }"
    assert f"http-request sc-inc-gpc0(0) {over}" in text, "counted as a rejected request"
    refusal = next(line for line in text.splitlines() if "tokens per minute" in line)
    assert refusal.strip().startswith("http-request return status 429") and refusal.endswith(over)
    assert "hdr Retry-After %[var(txn.tokens_retry)]" in refusal and '"code":"rate_limit_exceeded"' in refusal
    # Seconds until the minute's tokens fall under the limit, were they spread evenly: 1 to 60.
    assert "var(txn.key_tokens),sub(5000),mul(60),div(txn.key_tokens),add(1)" in text
    # Before routing: a refused request never reaches a model.
    assert text.index("tokens per minute") < text.index("use_backend %[var(txn.backend)]")


def test_with_peers_the_limit_checks_every_replicas_tokens() -> None:
    text = files(peers=PEERS, local_peer="gw-b")["haproxy.cfg"]
    assert "track-sc0 var(txn.client) table per_key_gw-b" in text
    for other in ("gw-a", "gw-c"):
        assert f"var(txn.client),table_gpc1_rate(per_key_{other}),add(txn.key_tokens)" in text
    assert "table_gpc1_rate(per_key_gw-b)" not in text, "its own tokens come from sc0"
    assert text.count(f"store {KEY_COUNTERS} peers gateway") == 3, "every table replicates gpc1"


def test_without_a_limit_or_keys_nothing_counts_tokens() -> None:
    for changes in ({"tokens_per_minute": None}, {"keys_file": None}):
        rendered = files(**changes)
        assert USAGE_LUA_FILE not in rendered
        assert "usage" not in rendered["haproxy.cfg"] and "key_tokens" not in rendered["haproxy.cfg"]
    # The table keeps its token columns: replicas reloaded with and without a limit still share it.
    assert f"store {KEY_COUNTERS}\n" in files(tokens_per_minute=None)["haproxy.cfg"]


def test_the_tables_token_columns_are_parsed() -> None:
    line = "0x1: key=team-a use=1 exp=1 gpc0=0 gpc1=1234 gpc1_rate(60000)=900 http_req_cnt=3"
    (entry,) = parse_table(line)
    assert (entry.tokens_total, entry.tokens_per_minute, entry.requests_total) == (1234, 900, 3)
