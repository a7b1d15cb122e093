"""usage.lua, the gateway's token counter, run by lupa's Lua 5.3 (HAProxy 2.6's) with HAProxy's
filter API stubbed: the tokens it adds to the key's counter for JSON answers and SSE streams,
whatever the chunks the answer arrives in."""

from __future__ import annotations

import json
from typing import Any

import pytest

from glm_operator.gateway.haproxy_config import render_usage_lua

DRIVER = """
local registered
filter = { FLT_CFG_FL_HTX = 1, CONTINUE = 1, register_data_filter = function() end }
core = { register_filter = function(name, class, factory) registered = class end }
load(...)()
return function(pieces, content_type, request_bytes)
  local usage = registered:new()
  local headers = { ["content-type"] = { [0] = content_type } }
  local head = { is_resp = function() return true end, get_headers = function() return headers end }
  usage:http_headers(nil, head)
  for _, piece in ipairs(pieces) do
    local msg = {
      body = function() return piece end,
      input = function() return #piece end,
      forward = function(_, length) return length end,
    }
    usage:http_payload(nil, msg)
  end
  local added = 0
  local txn = {
    f = { sc_inc_gpc1 = function() added = added + 1 end },
    get_var = function(_, name) if name == "txn.request_bytes" then return request_bytes end end,
  }
  local response = { is_resp = function() return true end }
  usage:end_analyze(txn, response)
  usage:end_analyze(txn, response) -- counted once
  return added
end
"""


@pytest.fixture(scope="module")
def count() -> Any:
    lupa = pytest.importorskip("lupa.lua53")
    runtime = lupa.LuaRuntime()
    run = runtime.execute(DRIVER, render_usage_lua())

    def counted(pieces: list[str], content_type: str = "application/json", request_bytes: int = 0) -> int:
        return int(run(runtime.table_from(pieces), content_type, request_bytes))

    return counted


def splits(text: str) -> list[list[str]]:
    """The text whole, cut in two at every byte, and byte by byte."""
    return [[text], *([text[:i], text[i:]] for i in range(1, len(text))), list(text)]


def sse(*events: dict[str, Any]) -> str:
    return "".join(f"data: {json.dumps(event)}\n\n" for event in events) + "data: [DONE]\n\n"


VLLM_ANSWER = json.dumps(
    {
        "id": "chatcmpl-1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}}],
        "usage": {
            "prompt_tokens": 12,
            "total_tokens": 40,
            "completion_tokens": 28,
            "prompt_tokens_details": {"cached_tokens": 4},
        },
        "prompt_logprobs": None,
    }
)


@pytest.mark.parametrize(
    ("answer", "tokens"),
    [
        (VLLM_ANSWER, 40),
        (json.dumps({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 5}}), 12),
        # A model's output naming "usage" is a JSON string: its quotes are escaped, it never counts.
        (
            json.dumps(
                {
                    "usage": {"total_tokens": 9},
                    "choices": [{"message": {"content": '"usage": {"total_tokens": 999}'}}],
                }
            ),
            9,
        ),
        (json.dumps({"error": {"message": "bad", "type": "BadRequestError", "code": 400}}), 0),
        # "usage" as a value, or null, is no usage object: the one after it counts.
        (json.dumps({"tags": ["usage"], "usage": None, "x": {"usage": {"total_tokens": 21}}}), 21),
    ],
    ids=["vllm", "prompt-plus-completion", "usage-in-the-output", "error", "not-an-object"],
)
def test_a_json_answer_counts_its_usage(count: Any, answer: str, tokens: int) -> None:
    for pieces in splits(answer):
        assert count(pieces) == tokens, pieces


def test_a_stream_counts_the_usage_of_its_last_chunk(count: Any) -> None:
    delta = {"choices": [{"index": 0, "delta": {"content": "t"}}], "usage": None}
    # vLLM's continuous usage stats: every chunk carries the usage so far; the last one wins.
    running = {"choices": [{"index": 0, "delta": {"content": "t"}}], "usage": {"total_tokens": 11}}
    last = {"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}}
    stream = sse(delta, running, delta, last)
    for pieces in splits(stream):
        assert count(pieces, "text/event-stream; charset=utf-8", 4000) == 13, pieces


def test_a_stream_without_usage_is_estimated(count: Any) -> None:
    delta = {"choices": [{"index": 0, "delta": {"content": "data: x"}}]}
    stream = sse(delta, delta, delta)
    # Three events (not [DONE]), and 401 request bytes at 4 a token: 101 for the prompt.
    for pieces in splits(stream):
        assert count(pieces, "text/event-stream", 401) == 3 + 101, pieces
    assert count([], "text/event-stream", 0) == 0
