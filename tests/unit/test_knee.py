"""The load test's pure analysis (planning/speed/knee.py): percentiles, throughput and the knee rule,
on the sweeps of tests/fixtures/loadtest-sweeps.yaml."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from glm_operator.planning.speed.knee import (
    LevelResult,
    RequestSample,
    find_knee,
    percentile,
    summarize_level,
)

SWEEPS: list[dict[str, Any]] = yaml.safe_load(
    (Path(__file__).resolve().parents[1] / "fixtures" / "loadtest-sweeps.yaml").read_text()
)


def levels_of(sweep: dict[str, Any]) -> list[LevelResult]:
    return [LevelResult.from_dict(level) for level in sweep["levels"]]


@pytest.mark.parametrize("sweep", SWEEPS, ids=[s["name"] for s in SWEEPS])
def test_knee_of_each_fixture_sweep(sweep: dict[str, Any]) -> None:
    knee = find_knee(levels_of(sweep))
    assert knee.concurrency == sweep["knee"], knee.reason


@pytest.mark.parametrize("sweep", SWEEPS, ids=[s["name"] for s in SWEEPS])
def test_level_order_does_not_matter(sweep: dict[str, Any]) -> None:
    assert find_knee(list(reversed(levels_of(sweep)))) == find_knee(levels_of(sweep))


def test_the_reason_gives_the_numbers_of_the_step() -> None:
    knee = find_knee(levels_of(SWEEPS[0]))
    assert knee.reason == (
        "from concurrency 16 to 64 output tokens/s rise +6.6 % (< 10 %) while ITL p50 rises +275.8 % (> 20 %)"
    )
    assert "raise the top concurrency" in find_knee(levels_of(SWEEPS[1])).reason
    assert "HTTP 503: overloaded" in find_knee(levels_of(SWEEPS[-1])).reason


def test_thresholds_move_the_knee() -> None:
    levels = levels_of(SWEEPS[3])  # 4 -> 8: +31.6 % tokens/s, +52 % ITL
    assert find_knee(levels).concurrency == 8
    assert find_knee(levels, min_throughput_gain=0.40).concurrency == 4
    assert find_knee(levels, min_itl_rise=1.5).concurrency is None


def test_one_level_is_not_a_sweep() -> None:
    assert find_knee(levels_of(SWEEPS[0])[:1]).concurrency is None


def test_summarize_level_percentiles_and_throughput() -> None:
    samples = [
        RequestSample(ttft_s=0.1 * (i + 1), itl_s=(0.01, 0.02, 0.03), output_tokens=4, latency_s=1.0)
        for i in range(10)
    ]
    failed = RequestSample(None, (), 0, 0.5, "HTTP 500: boom")
    level = summarize_level(8, [*samples, failed], wall_s=2.0)
    assert (level.requests, level.errors, level.output_tokens) == (11, 1, 40)
    assert level.output_tokens_per_s == 20.0
    assert level.ttft_p50_s == pytest.approx(0.5) and level.ttft_p95_s == pytest.approx(1.0)
    assert (level.itl_p50_s, level.itl_p95_s) == (0.02, 0.03)
    assert level.first_error == "HTTP 500: boom"
    assert LevelResult.from_dict(level.to_dict()) == level
    empty = summarize_level(1, [failed], wall_s=1.0)
    assert math.isnan(empty.itl_p50_s) and empty.to_dict()["itl_p50_s"] is None
    assert percentile([], 0.5) != percentile([], 0.5)  # NaN
