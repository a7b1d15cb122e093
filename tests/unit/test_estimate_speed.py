"""``glm-operator estimate --concurrency N``: the predicted speed for a load, in status.plan's keys."""

from __future__ import annotations

import json

import pytest

from glm_operator.cli import main


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["estimate", "--model", "zai-org/GLM-4.7-Flash", "--max-model-len", "8192", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def predicted(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, float]:
    code, out, _ = run(capsys, "--gpu", "H100", *args, "-o", "json")
    assert code == 0
    value: dict[str, float] = json.loads(out)["predicted"]
    return value


def test_the_prediction_has_status_plans_keys_and_follows_the_load(
    capsys: pytest.CaptureFixture[str],
) -> None:
    one = predicted(capsys, "--concurrency", "1")
    many = predicted(capsys, "--concurrency", "32")
    long = predicted(capsys, "--concurrency", "32", "--input-tokens", "4096")
    for p in (one, many, long):
        assert {"itlMilliseconds", "ttftMilliseconds", "outputTokensPerSecond"} <= set(p)
    assert many["outputTokensPerSecond"] > one["outputTokensPerSecond"]
    assert many["itlMilliseconds"] > one["itlMilliseconds"]
    assert long["ttftMilliseconds"] > many["ttftMilliseconds"]  # a 4k prompt takes longer to prefill
    assert (many["concurrency"], many["inputTokens"], many["outputTokens"]) == (32, 512, 128)


def test_mtp_and_its_acceptance_move_the_prediction(capsys: pytest.CaptureFixture[str]) -> None:
    plain = predicted(capsys, "--concurrency", "1")
    mtp = predicted(capsys, "--concurrency", "1", "--speculative-config", '{"method":"mtp"}')
    poor = predicted(
        capsys, "--concurrency", "1", "--speculative-config", '{"method":"mtp"}', "--acceptance-rate", "0.05"
    )
    sure = predicted(
        capsys, "--concurrency", "1", "--speculative-config", '{"method":"mtp"}', "--acceptance-rate", "0.95"
    )
    # GLM-4.7-Flash's short step: one draft at the published rate about breaks even, as measured on the H200
    # (the speculative step's overhead, tests/unit/test_speculative.py); a sure draft pays, a poor one costs
    assert abs(mtp["itlMilliseconds"] / plain["itlMilliseconds"] - 1) < 0.1
    assert sure["itlMilliseconds"] < plain["itlMilliseconds"] < poor["itlMilliseconds"]


def test_bad_load_arguments_name_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--gpu-memory-gib", "79.18", "--concurrency", "4")
    assert code == 2 and "--concurrency needs --gpu" in err
    code, _, err = run(capsys, "--gpu", "H100", "--concurrency", "0")
    assert code == 2 and "--concurrency" in err
    code, _, err = run(capsys, "--gpu", "H100", "--speculative-config", '{"method":"ngram"}')
    assert code == 2 and "only" in err
