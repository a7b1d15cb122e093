"""The per-key tokens-per-minute limit on a real HAProxy (loopback) in front of the vLLM emulator:
usage.lua counts each answer's ``usage`` (a JSON answer, a stream's last chunk) into the key's
table entry when the answer ends; a key at its limit gets an OpenAI-style 429 with Retry-After
before anything reaches the model, and another key is not affected."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from glm_operator.clients.haproxy import send
from glm_operator.commands.gateway import key_metrics
from glm_operator.gateway.haproxy_config import BYTES_PER_TOKEN, WAKE_TABLE, Peer
from glm_operator.gateway.routes import Backend, Member, RoutingTable, backend_name
from tests.harness.cluster import free_port, wait_for
from tests.harness.haproxy import LocalGateway
from tests.harness.load import request
from tests.harness.vllm_emulator import VLLMMetricsEmulator
from tests.integration.test_gateway_peers import settled

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
    """The client's tokens as ``gateway`` knows them: its table's, with peers every replica's."""
    tables = [f"per_key_{p.name}" for p in gateway.settings.peers] or [gateway.settings.key_table]
    return sum(e.tokens_total for t in tables for e in gateway.runtime.key_counters(t) if e.client == client)


def counts(gateway: LocalGateway, client: str, expected: int) -> bool:
    """Whether the client's tokens reach ``expected`` (bounded wait: an answer's tokens land as it
    ends, the last bytes may reach the client first; another replica's, with the peers' push) and
    are exactly that."""
    try:
        wait_for(lambda: tokens(gateway, client) >= expected or None, timeout=10, what="the count")
    except AssertionError:
        return False
    return tokens(gateway, client) == expected


def served_by(emulator: VLLMMetricsEmulator) -> RoutingTable:
    member = Member(1, "flash-0", emulator.host, emulator.port, 1, True)
    return RoutingTable((Backend(MODEL, backend_name(MODEL), (member,)),))


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[tuple[LocalGateway, VLLMMetricsEmulator]]:
    keys = tmp_path / "keys.map"
    keys.write_text("sk-a team-a\nsk-b team-b\n")
    emulator = VLLMMetricsEmulator({MODEL: (0.0, 0.0)}).start()
    table = served_by(emulator)
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

    # The sidecar exports them per client.
    families = {f.name: f for f in key_metrics(proxy.runtime).collect()}
    exported = {s.labels["client"]: s.value for s in families["glm_gateway_client_tokens"].samples}
    assert exported == {"team-a": counted, "team-b": prompt_tokens(plain) + 20}
    per_minute = families["glm_gateway_client_tokens_per_minute"].samples
    assert {s.labels["client"]: s.value for s in per_minute}["team-a"] == counted


def test_one_keys_tokens_count_on_every_replica(tmp_path: Path) -> None:
    """Two replicas sharing the per-key tables through peers: tokens used through one count on the
    other, and the key is refused on both once their sum reaches the limit."""
    keys = tmp_path / "keys.map"
    keys.write_text("sk-a team-a\nsk-b team-b\n")
    emulator = VLLMMetricsEmulator({MODEL: (0.0, 0.0)}).start()
    table = served_by(emulator)
    peers = (Peer("gw-a", "127.0.0.1", free_port()), Peer("gw-b", "127.0.0.1", free_port()))
    replicas = []
    for peer in peers:
        (tmp_path / peer.name).mkdir()
        settings = {"peers": peers, "local_peer": peer.name, "hold_max_requests": 0}
        replicas.append(
            LocalGateway(tmp_path / peer.name, keys_file=str(keys), tokens_per_minute=LIMIT, **settings)
        )
    a, b = replicas
    try:
        a.start(table)
        b.start(table)
        wait_for(lambda: settled(a) and settled(b), timeout=30, what="the replicas' peer sessions")

        first = chat(50)
        assert request(a.url, CHAT, first, api_key="sk-a").status == 200
        used = prompt_tokens(first) + 50
        assert used < LIMIT <= 2 * used
        assert counts(b, "team-a", used), "a's count reached b"
        assert request(b.url, CHAT, first, api_key="sk-a").status == 200, "under the limit: b lets it through"
        assert counts(a, "team-a", 2 * used)

        for gateway in (a, b):
            refused = request(gateway.url, CHAT, first, api_key="sk-a")
            assert (
                refused.status == 429 and "tokens per minute" in json.loads(refused.body)["error"]["message"]
            )
            assert 1 <= int(refused.headers["retry-after"]) <= 60
        assert request(b.url, CHAT, first, api_key="sk-b").status == 200, "another key is not affected"

        # A replica down: the other keeps its copy of the stopped one's table, and still refuses.
        b.stop()
        assert request(a.url, CHAT, first, api_key="sk-a").status == 429
    finally:
        a.stop()
        b.stop()
        emulator.stop()


def test_a_held_stream_is_counted_once(tmp_path: Path) -> None:
    """A stream held while its model has no ready replica is answered by hold.lua, which sends the
    request again through the unfiltered held_streams frontend: its tokens count once."""
    keys = tmp_path / "keys.map"
    keys.write_text("sk-a team-a\n")
    emulator = VLLMMetricsEmulator({MODEL: (0.0, 0.0)}).start()
    proxy = LocalGateway(
        tmp_path, keys_file=str(keys), tokens_per_minute=LIMIT, health_check_interval_seconds=30
    )
    body = chat(7, stream=True, stream_options={"include_usage": True})
    answers = []
    held = threading.Thread(target=lambda: answers.append(request(proxy.url, CHAT, body, api_key="sk-a")))
    try:
        proxy.start(RoutingTable((Backend(MODEL, backend_name(MODEL), ()),)))
        held.start()
        # Held: counted in the "wake" table as it enters hold.lua.
        wake = f"show table {WAKE_TABLE}"
        wait_for(lambda: backend_name(MODEL) in send(proxy.settings.runtime_socket, wake), what="the hold")
        time.sleep(0.5)  # in hold.lua's loop
        assert proxy.driver.apply(served_by(emulator)) == "runtime"
        held.join(timeout=30)
        assert answers and answers[0].status == 200 and b'"usage"' in answers[0].body
        assert counts(proxy, "team-a", prompt_tokens(body) + 7)
    finally:
        proxy.stop()
        emulator.stop()
