"""``glm-operator loadtest`` against the vLLM emulator on 127.0.0.1 (no external binary, but real time:
the integration tier, so the unit tier stays free of the wall clock).

The emulator's decode slows down past ``batch_knee`` requests in flight (each token takes
``(running / batch_knee) ** 2`` times longer), so its output tokens/s fall past that concurrency while
the inter-token latency quadruples with each doubling: the tool must find the knee there. Assertions
are on the shape (which level is the knee, counts), never on how long anything took.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from glm_operator.cli import main
from glm_operator.clients.openai_load import LoadTestConfig, endpoint, request_body, run_sweep
from tests.harness.vllm_emulator import LatencyModel, VLLMMetricsEmulator

MODEL = "glm-4.5-air"
BATCH_KNEE = 8
# 48 tokens of 8 ms: one request is ~0.4 s below the knee, so the fixed per-request overheads are
# a few % of it and the throughput above the knee stays far below the 10 % rule. (At 4 ms a level
# lasted ~0.2 s and a 50 ms scheduling stall on a busy 2-core CI machine moved the knee in ~1 run of 20.
# At 8 ms with tokens/s merely flat past the knee, a CI run still saw them rise >= 10 % from 8 to 16
# once: past_knee_power=2 halves them there, so only a stall of more than half a level can hide it.)
LATENCY = LatencyModel(seconds_per_output_token=0.008, batch_knee=BATCH_KNEE, past_knee_power=2.0)


@pytest.fixture
def emulator() -> Iterator[VLLMMetricsEmulator]:
    with VLLMMetricsEmulator({MODEL: (0, 0)}, latency=LATENCY) as e:
        yield e


def loadtest(capsys: pytest.CaptureFixture[str], url: str, *extra: str) -> tuple[int, dict[str, Any]]:
    code = main(
        [
            "loadtest", "--url", url, "--model", MODEL, "--input-tokens", "64", "--output-tokens", "48",
            "--requests-per-worker", "2", "-o", "json", *extra,
        ]
    )  # fmt: skip
    return code, json.loads(capsys.readouterr().out)


def test_finds_the_emulators_knee(capsys: pytest.CaptureFixture[str], emulator: VLLMMetricsEmulator) -> None:
    code, report = loadtest(capsys, emulator.url, "--concurrency", "1,2,4,8,16")
    assert code == 0
    assert report["knee"]["concurrency"] == BATCH_KNEE, (
        json.dumps(report["levels"]) + report["knee"]["reason"]
    )
    levels = {lv["concurrency"]: lv for lv in report["levels"]}
    assert sorted(levels) == [1, 2, 4, 8, 16]
    for c, lv in levels.items():
        assert lv["errors"] == 0 and lv["requests"] == c * 2 and lv["warmup_requests"] == c
        assert lv["output_tokens"] == c * 2 * 48  # the server's usage count: max_tokens with ignore_eos
        assert lv["ttft_p50_s"] is not None and lv["itl_p95_s"] >= lv["itl_p50_s"]
        # the steady window (every worker recording) is inside the level, and its halves were measured
        assert 0 < lv["steady_s"] < lv["wall_s"] and lv["output_tokens_per_s_spread"] is not None
    assert emulator.stats()["max_in_flight"] == 16
    # each worker's warm-up request at each level reached the server and was left out of the figures
    assert emulator.stats()["requests"] == (1 + 2) * (1 + 2 + 4 + 8 + 16)


def test_the_table_names_the_knee(capsys: pytest.CaptureFixture[str], emulator: VLLMMetricsEmulator) -> None:
    code = main(
        [
            "loadtest", "--url", emulator.url + "/", "--model", MODEL, "--concurrency", "4,8,16",
            "--input-tokens", "16", "--output-tokens", "48", "--requests-per-worker", "2",
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert out.splitlines()[0].split()[:3] == ["CONC", "REQS", "ERRORS"]
    assert out.splitlines()[0].split()[-1] == "SPREAD" and out.splitlines()[1].endswith(" %")
    assert [line.split()[0] for line in out.splitlines()[1:4]] == ["4", "8", "16"]
    assert out.splitlines()[-1].startswith(f"knee: concurrency {BATCH_KNEE} (from concurrency 8 to 16")


def test_chat_endpoint(capsys: pytest.CaptureFixture[str], emulator: VLLMMetricsEmulator) -> None:
    code, report = loadtest(capsys, emulator.url, "--concurrency", "1,2", "--chat")
    assert code == 0 and report["endpoint"] == "/v1/chat/completions"
    assert all(lv["output_tokens"] == lv["requests"] * 48 for lv in report["levels"])


def test_a_server_without_a_tokenizer_is_timed_by_its_token_ids(capsys: pytest.CaptureFixture[str]) -> None:
    # vLLM started with --skip-tokenizer-init (the H200 harness) streams chunks with empty text: only
    # the token ids that --token-ids asks for show when each token came
    with VLLMMetricsEmulator({MODEL: (0, 0)}, latency=LATENCY, tokenizer=False) as bare:
        code, report = loadtest(capsys, bare.url, "--concurrency", "2", "--token-ids")
        assert code == 0 and report["levels"][0]["errors"] == 0
        assert report["levels"][0]["itl_p50_s"] is not None
        code, report = loadtest(capsys, bare.url, "--concurrency", "1")
    assert code == 1 and "carried no tokens" in report["levels"][0]["first_error"]


def test_failed_requests_are_counted_and_named(
    capsys: pytest.CaptureFixture[str], emulator: VLLMMetricsEmulator
) -> None:
    code = main(
        ["loadtest", "--url", emulator.url, "--model", "no-such-model", "--concurrency", "1,2",
         "--input-tokens", "4", "--output-tokens", "4", "--requests-per-worker", "1"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 1
    assert "error at 1: HTTP 404" in out and "does not exist" in out
    assert "knee: none (1 of 1 requests failed at concurrency 1" in out


def test_token_id_prompts_with_ignore_eos() -> None:
    config = LoadTestConfig("http://127.0.0.1:1", MODEL, (1,), input_tokens=100, output_tokens=7)
    body = request_body(config, 3)
    assert body["ignore_eos"] is True and body["max_tokens"] == 7 and body["stream"] is True
    prompt = body["prompt"]
    assert len(prompt) == 100 and all(isinstance(t, int) and 100 <= t < 10_000 for t in prompt)
    assert request_body(config, 3) == body and request_body(config, 4)["prompt"] != prompt
    assert endpoint("http://gw.example:8080/team-a", chat=False).path == "/team-a/v1/completions"
    assert endpoint("https://gw.example/v1/chat/completions", chat=False).port == 443


def test_unreachable_server_is_an_error_sample() -> None:
    with socket.socket() as s:  # a loopback port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = LoadTestConfig(
        f"http://127.0.0.1:{port}", MODEL, (1,), input_tokens=1, output_tokens=1, requests_per_worker=1
    )
    (level,) = asyncio.run(run_sweep(config))
    assert level.errors == 1 and "ConnectionRefusedError" in level.first_error


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--concurrency", "1,x"], "--concurrency '1,x'"),
        (["--concurrency", "0,4"], "every level must be 1 or more"),
        (["--url", "ftp://x"], "--url 'ftp://x'"),
        (["--output-tokens", "0"], "--output-tokens must be 1 or more"),
    ],
)
def test_bad_input_is_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    base = {"--url": "http://127.0.0.1:1", "--model": MODEL}
    for flag, value in zip(argv[::2], argv[1::2], strict=True):
        base[flag] = value
    assert main(["loadtest", *[x for kv in base.items() for x in kv]]) == 2
    assert message in capsys.readouterr().err
