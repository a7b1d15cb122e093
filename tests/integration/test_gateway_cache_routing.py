"""Cache-aware routing (loadBalancing: PrefixAffinity) on the real HAProxy with route.lua, vLLM
emulators on 127.0.0.x standing for the pods (each with its prefix cache): a conversation's turns
stay on the pod that holds its history, and their prompts hit its cache; conversations with other
prompts spread over the pods. The choice itself, over every case, is in
tests/unit/test_gateway_route_lua.py; the figures against first-message affinity and
least-connections in benchmarks/cache_routing_bench.py."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from glm_operator.gateway.routes import compute_routing_table
from tests.harness.cluster import free_port
from tests.harness.gateway_objects import H100, glmdeployment, vllm_pod
from tests.harness.haproxy import LocalGateway
from tests.harness.load import request
from tests.harness.vllm_emulator import LatencyModel, VLLMMetricsEmulator

pytestmark = pytest.mark.integration
MODEL = "glm-4.5-air"
KEY = "sk-cache"
CHAT = "/v1/chat/completions"


@pytest.fixture
def pods() -> Iterator[list[VLLMMetricsEmulator]]:
    port = free_port()
    started = [
        VLLMMetricsEmulator(
            {MODEL: (0, 0)}, port, host=f"127.0.0.{i + 2}", name=f"127.0.0.{i + 2}",
            latency=LatencyModel(base_seconds=0.002),
        ).start()
        for i in range(3)
    ]  # fmt: skip
    yield started
    for emulator in started:
        emulator.stop()


def test_each_conversation_stays_on_the_pod_holding_its_history(
    tmp_path: Path, pods: list[VLLMMetricsEmulator]
) -> None:
    keys = tmp_path / "keys.map"
    keys.write_text(f"{KEY} alice\n")
    port = pods[0].port
    table = compute_routing_table(
        [glmdeployment("air", MODEL, [(H100, 13.0)], port=port)],
        [vllm_pod(f"p{i}", "air", H100, e.host) for i, e in enumerate(pods)],
        slots=4,
    )
    with LocalGateway(tmp_path, keys_file=str(keys), balance="cache", slots=4) as gateway:
        gateway.start(table)
        served: dict[int, Counter[str]] = {c: Counter() for c in range(6)}
        cached = queried = 0
        histories = {
            c: [{"role": "system", "content": f"You answer questions about product {c}. " * 10}]
            for c in range(6)
        }
        for turn in range(4):
            for c, history in histories.items():
                history.append({"role": "user", "content": f"Question {turn} about product {c}? " * 4})
                body = {"model": MODEL, "max_tokens": 2, "messages": history}
                answer = request(gateway.url, CHAT, body, api_key=KEY)
                assert answer.status == 200, answer.body
                served[c][str(answer.served_by)] += 1
                usage = json.loads(answer.body)["usage"]
                if turn > 0:
                    cached += usage["prompt_tokens_details"]["cached_tokens"]
                    queried += usage["prompt_tokens"]
                history.append({"role": "assistant", "content": f"Answer {turn}. " * 8})
        # every turn of a conversation on one pod, and the six conversations not all on one pod
        assert all(len(counts) == 1 for counts in served.values()), served
        assert len({next(iter(counts)) for counts in served.values()}) >= 2, served
        # turns after the first find their history in that pod's prefix cache
        assert cached / queried > 0.7, (cached, queried)
