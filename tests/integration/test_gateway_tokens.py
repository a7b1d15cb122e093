"""The per-key tokens-per-minute limit on a real HAProxy (loopback) in front of the vLLM emulator:
usage.lua counts each answer's ``usage`` (a JSON answer, a stream's last chunk) into the key's
table entry when the answer ends; a key at its limit gets an OpenAI-style 429 with Retry-After
before anything reaches the model, and another key is not affected."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from glm_operator.gateway.haproxy_config import BYTES_PER_TOKEN
from glm_operator.gateway.routes import Backend, Member, RoutingTable, backend_name
from tests.harness.cluster import wait_for
from tests.harness.haproxy import LocalGateway
from tests.harness.load import request
from tests.harness.vllm_emulator import VLLMMetricsEmulator

pytestmark = pytest.mark.integration
MODEL, CHAT = "glm-flash", "/v1/chat/completions"
LIMIT = 100


def chat(max_tokens: int, content: str = "x" * 40, **extra: object) -> dict[str, object]:
    """A chat request of 10 prompt tokens (the emulator counts 4 characters a token, of the JSON
    of its messages) and ``max_tokens`` completion tokens."""
    messages = [{"role": "user", "content": content}]
    return {"model": MODEL, "messages": messages, "max_tokens": max_tokens, **extra}


def prompt_tokens(body: dict[str, object]) -> int:
    return len(json.dumps(body["messages"])) // 4


def tokens(gateway: LocalGateway, client: str) -> int:
    entries = gateway.runtime.key_counters(gateway.settings.key_table)
    return next((e.tokens_total for e in entries if e.client == client), 0)


def counts(gateway: LocalGateway, client: str, expected: int) -> bool:
    """Whether the client's tokens reach ``expected`` (bounded wait: an answer's tokens land as it
    ends, the last bytes may reach the client first) and stay there."""
    try:
        wait_for(lambda: tokens(gateway, client) >= expected or None, timeout=5, what="the count")
    except AssertionError:
        return False
    return tokens(gateway, client) == expected


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[tuple[LocalGateway, VLLMMetricsEmulator]]:
    keys = tmp_path / "keys.map"
    keys.write_text("sk-a team-a\nsk-b team-b\n")
    emulator = VLLMMetricsEmulator({MODEL: (0.0, 0.0)}).start()
    member = Member(1, "flash-0", emulator.host, emulator.port, 1, True)
    table = RoutingTable((Backend(MODEL, backend_name(MODEL), (member,)),))
    proxy = LocalGateway(tmp_path, keys_file=str(keys), tokens_per_minute=LIMIT, hold_max_requests=0)
    try:
        proxy.start(table)
        yield proxy, emulator
    finally:
        proxy.stop()
        emulator.stop()


def test_usage_is_counted_and_a_key_over_its_limit_gets_429(
    gateway: tuple[LocalGateway, VLLMMetricsEmulator],
) -> None:
    proxy, emulator = gateway
    plain = chat(20)
    assert request(proxy.url, CHAT, plain, api_key="sk-a").status == 200
    counted = prompt_tokens(plain) + 20
    assert counts(proxy, "team-a", counted), "the JSON answer's usage (prompt + completion)"

    streamed = chat(30, stream=True, stream_options={"include_usage": True})
    answer = request(proxy.url, CHAT, streamed, api_key="sk-a")
    assert answer.status == 200 and b'"usage"' in answer.body and answer.body.endswith(b"data: [DONE]\n\n")
    counted += prompt_tokens(streamed) + 30
    assert counts(proxy, "team-a", counted), "the stream's last chunk carries its usage"

    # A stream that did not ask for usage: one token per data event, its body's bytes / 4 the prompt.
    bare = chat(25, stream=True)
    assert request(proxy.url, CHAT, bare, api_key="sk-a").status == 200
    counted += 25 + -(-len(json.dumps(bare)) // BYTES_PER_TOKEN)
    assert counts(proxy, "team-a", counted), tokens(proxy, "team-a")

    # The key is over its 100 tokens a minute now: refused before the model sees the request.
    served = emulator.stats()["requests"]
    refused = request(proxy.url, CHAT, plain, api_key="sk-a")
    assert refused.status == 429, refused.body
    error = json.loads(refused.body)["error"]
    assert error["code"] == "rate_limit_exceeded" and "100 tokens per minute" in error["message"]
    retry_after = int(refused.headers["retry-after"])
    assert 1 <= retry_after <= 60
    assert emulator.stats()["requests"] == served, "a refused request never reaches the model"
    assert tokens(proxy, "team-a") == counted, "a refusal costs no tokens"

    # Another key has its own minute.
    assert request(proxy.url, CHAT, plain, api_key="sk-b").status == 200
    assert counts(proxy, "team-b", prompt_tokens(plain) + 20)
