"""route.lua, the gateway's cache-aware choice of a server, run by lupa's Lua 5.3 (HAProxy 2.6's)
with HAProxy's Lua API stubbed: each server's stats (status, weight, requests in flight, address)
and the xxh64 converter (here a 64-bit BLAKE2b). The real HAProxy runs it in
tests/integration/test_gateway_cache_routing.py."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from glm_operator.gateway.haproxy_config import (
    BYTES_PER_TOKEN,
    CACHE_BLOCK_TOKENS,
    GatewaySettings,
    render_route_lua,
)

BLOCK_BYTES = CACHE_BLOCK_TOKENS * BYTES_PER_TOKEN

DRIVER = """
local action
core = { register_action = function(_, _, fn) action = fn end }
load(...)()
return function(body, backend_name, servers, hash)
  local backend = { servers = {} }
  for name, stats in pairs(servers) do
    backend.servers[name] = { get_stats = function() return stats end }
  end
  core.backends = { [backend_name] = backend }
  local vars = {}
  local txn = {
    sf = { req_body = function() return body end },
    c = { xxh64 = function(_, text) return hash(text) end },
    set_var = function(_, name, value) vars[name] = value end,
  }
  action(txn, backend_name)
  return vars["txn.cache_server"], vars["txn.cache_blocks"]
end
"""


def xxh64_stand_in(text: bytes | str) -> int:
    data = text.encode() if isinstance(text, str) else text
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big", signed=True)


class Route:
    """One Lua state (as one HAProxy process): servers' memories persist between calls."""

    def __init__(self, load_factor: int = 150) -> None:
        lupa = pytest.importorskip("lupa.lua53")
        self.runtime = lupa.LuaRuntime()
        settings = GatewaySettings(
            config_dir="/tmp", runtime_socket="/tmp/s", affinity_load_factor=load_factor
        )
        self.run = self.runtime.execute(DRIVER, render_route_lua(settings))

    def __call__(
        self, body: dict[str, Any] | str, servers: dict[str, dict[str, Any]], backend: str = "m_air"
    ) -> tuple[str | None, int | None]:
        text = body if isinstance(body, str) else json.dumps(body)
        stats = {
            name: self.runtime.table_from(
                {"status": "UP", "scur": 0, "qcur": 0, "weight": 1, "addr": f"127.0.0.{i + 2}:8000", **s}
            )
            for i, (name, s) in enumerate(servers.items())
        }
        server, blocks = self.run(text, backend, self.runtime.table_from(stats), xxh64_stand_in)
        return server, blocks


def chat(*contents: str) -> dict[str, Any]:
    roles = ["system"] + ["user", "assistant"] * len(contents)
    return {
        "model": "glm-4.5-air",
        "messages": [{"role": role, "content": c} for role, c in zip(roles, contents, strict=False)],
    }


SYSTEM = "You are a careful assistant for the billing team. " * 16  # ~13 blocks
IDLE3 = {"s1": {}, "s2": {}, "s3": {}}


def test_a_conversation_stays_on_the_server_that_served_its_beginning() -> None:
    route = Route()
    first, _ = route(chat(SYSTEM, "Why was I charged twice this month? " * 4), IDLE3)
    assert first == "s1"  # no server has seen it: the fewest in flight, then the name
    # Another conversation's first turn while s1 is busier: elsewhere.
    other, blocks = route(
        chat("Translate to French. " * 20, "Hello there " * 10), {**IDLE3, "s1": {"scur": 2}}
    )
    assert (other, blocks) == ("s2", 0)
    # The first conversation's next turn repeats its first turn: back on s1, though s1 is busier,
    # as long as s1 has a free place in its batch (weight = planned concurrency, here 4).
    turn2 = chat(SYSTEM, "Why was I charged twice this month? " * 4, "Because of a retry.", "Refund?")
    batch4 = {name: {"weight": 4} for name in IDLE3}
    server, blocks = route(turn2, {**batch4, "s1": {"scur": 3, "weight": 4}})
    assert server == "s1"
    assert blocks >= len(SYSTEM) // BLOCK_BYTES
    # With one place each (weight 1), s1 at 1 of 1 in flight is past its cap: ceil(1.5 * 2 / 3) = 1.
    assert route(turn2, {**IDLE3, "s1": {"scur": 1}}) == ("s2", 0)


def test_the_longest_run_of_blocks_wins() -> None:
    route = Route()
    question = "Summarise the attached contract clause by clause. " * 6
    route(chat(SYSTEM, "unrelated " * 40), IDLE3)  # s1: SYSTEM's blocks only
    route(chat(SYSTEM, question), {**IDLE3, "s1": {"scur": 5}})  # s2: SYSTEM and the question
    server, blocks = route(chat(SYSTEM, question, "Done.", "And the next one?"), IDLE3)
    assert server == "s2"
    assert blocks > len(SYSTEM) // BLOCK_BYTES + 1


def test_the_load_cap_keeps_a_hot_prefix_from_piling_onto_one_server() -> None:
    route = Route(load_factor=150)
    route(chat(SYSTEM, "a question " * 20), IDLE3)  # s1 holds the prefix
    # s1 has 10 in flight, the others none: its cap is ceil(1.5 * 11 / 3) = 6 < 11.
    server, blocks = route(chat(SYSTEM, "another question " * 20), {**IDLE3, "s1": {"scur": 10}})
    assert (server, blocks) == ("s2", 0)
    # Within the cap (s1 at 4 of 12 in flight: cap ceil(1.5 * 13 / 3) = 7 >= 5) it stays.
    server, _ = route(
        chat(SYSTEM, "a third question " * 20), {"s1": {"scur": 4}, "s2": {"scur": 4}, "s3": {"scur": 4}}
    )
    assert server == "s1"


def test_ties_go_to_the_fewest_requests_in_flight_per_unit_of_weight() -> None:
    route = Route()
    servers = {"s1": {"scur": 3, "weight": 1}, "s2": {"scur": 3, "weight": 4}, "s3": {"scur": 2, "weight": 1}}
    assert route(chat("short"), servers) == ("s2", 0)  # (3+1)/4 < (2+1)/1 < (3+1)/1


def test_unusable_servers_are_never_chosen() -> None:
    route = Route()
    route(chat(SYSTEM, "q " * 50), {"s1": {}})  # s1 learns the prefix
    down = {"s1": {"status": "MAINT"}, "s2": {"status": "DOWN"}, "s3": {"status": "no check", "scur": 9}}
    assert route(chat(SYSTEM, "q " * 50), down)[0] == "s3"
    assert route(chat(SYSTEM, "q " * 50), {"s1": {"weight": 0}, "s2": {"status": "UP 1/2"}})[0] == "s2"
    assert route(chat(SYSTEM), {"s1": {"status": "DOWN"}}) == (None, None)


def test_a_new_pod_in_a_slot_starts_with_an_empty_memory() -> None:
    route = Route()
    route(chat(SYSTEM, "q " * 50), {"s1": {}, "s2": {"scur": 1}})
    assert route(chat(SYSTEM, "q " * 50), {"s1": {"scur": 1}, "s2": {}})[0] == "s1"
    moved = {"s1": {"scur": 1, "addr": "127.0.0.9:8000"}, "s2": {}}
    assert route(chat(SYSTEM, "q " * 50), moved) == ("s2", 0)


def test_completion_token_ids_are_cut_in_blocks_of_vllms_block_size() -> None:
    route = Route()
    tokens = list(range(1000, 1000 + 10 * CACHE_BLOCK_TOKENS + 3))
    route({"model": "m", "prompt": tokens}, {"s1": {"scur": 1}, "s2": {}})
    server, blocks = route({"model": "m", "prompt": [*tokens[:-3], 7, 8]}, {"s1": {}, "s2": {"scur": 1}})
    assert (server, blocks) == ("s2", 10)
    # a text prompt is cut in blocks of BLOCK_BYTES bytes
    text = "x" * (9 * BLOCK_BYTES + 10)
    route({"model": "m", "prompt": text}, {"s1": {}, "s2": {"scur": 1}})
    assert route({"model": "m", "prompt": text[:-5] + "tail"}, {"s1": {"scur": 1}, "s2": {}}) == ("s1", 9)
    assert route({"model": "m", "prompt": [text + "y"]}, {"s1": {"scur": 1}, "s2": {}}) == ("s1", 9)


def test_a_short_run_every_request_shares_does_not_attract() -> None:
    """Fewer than CACHE_MIN_RUN_BLOCKS blocks in common (here one short instruction) count as none."""
    route = Route()
    instruction = "Answer from the document. "  # under one block with its header
    first = {"model": "m", "messages": [{"role": "system", "content": instruction},
                                        {"role": "user", "content": "Document A " * 200}]}  # fmt: skip
    route(first, {"s1": {}, "s2": {"scur": 1}})
    second = {"model": "m", "messages": [{"role": "system", "content": instruction},
                                         {"role": "user", "content": "Document B " * 200}]}  # fmt: skip
    assert route(second, {"s1": {"scur": 1}, "s2": {}}) == ("s2", 0)
    assert route(first, {"s1": {"scur": 1}, "s2": {}})[0] == "s1"


def test_a_body_cut_short_routes_by_its_beginning() -> None:
    route = Route()
    body = json.dumps(chat(SYSTEM, "a long document: " + "lorem ipsum " * 500))
    route(body, {"s1": {}, "s2": {"scur": 1}})
    server, blocks = route(body[: len(body) // 2], {"s1": {"scur": 1}, "s2": {}})  # as past the buffer
    assert server == "s1" and blocks > 10


@pytest.mark.parametrize(
    "body",
    ['{"model": "m"}', "not json at all", '{"messages": 5}', "", '{"model":"m","messages":[[[[' * 200],
)
def test_a_request_without_a_prompt_is_left_to_the_backends_balance(body: str) -> None:
    route = Route()
    server, _ = route(body, IDLE3)
    assert server is None or body.startswith('{"model":"m","messages":[[[[')


def test_escapes_and_list_contents_are_read() -> None:
    route = Route()
    parts = [{"type": "text", "text": 'Say "hi" \\ twice. ' * 40}, {"type": "image_url", "image_url": "u"}]
    route({"model": "m", "messages": [{"role": "user", "content": parts}]}, {"s1": {"scur": 1}, "s2": {}})
    server, blocks = route(
        {"model": "m", "messages": [{"role": "user", "content": parts}, {"role": "user", "content": "x"}]},
        {"s1": {}, "s2": {"scur": 1}},
    )
    assert server == "s2" and blocks >= 8
