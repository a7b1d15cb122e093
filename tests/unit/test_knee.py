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


def streamed(first_s: float, gap_s: float, tokens: int, usage: int | None = None) -> RequestSample:
    """``tokens`` arriving one a chunk from ``first_s``, every ``gap_s`` (usage: the server's count)."""
    arrivals = tuple((first_s + i * gap_s, 1) for i in range(tokens))
    return RequestSample(0.05, (gap_s,) * (tokens - 1), usage or tokens, 1.0, arrivals=arrivals)


def test_the_steady_window_counts_only_the_tokens_inside_it_and_its_halves_give_the_spread() -> None:
    # two workers' recorded requests: one streams 10 tokens/s from t=0, the other 30 tokens/s from t=5;
    # each half of the window [5, 10) sees 25 + 75 tokens in 2.5 s: 40 tokens/s (the whole level: 12.5)
    slow, fast = streamed(0.0, 0.1, 100), streamed(5.0, 1 / 30, 150)
    level = summarize_level(2, [slow, fast], wall_s=20.0, steady=(5.0, 10.0), warmup_requests=2)
    assert level.output_tokens_per_s == pytest.approx(40.0, rel=0.02)
    assert level.output_tokens_per_s_spread == pytest.approx(0.0, abs=0.03)
    assert level.steady_s == 5.0 and level.warmup_requests == 2
    assert level.output_tokens == 250  # every recorded token still counts in the totals
    # a stall in the window's second half shows as spread, and the rate is what the window saw
    stalled = summarize_level(1, [streamed(0.0, 0.1, 50)], wall_s=20.0, steady=(0.0, 10.0))
    assert stalled.output_tokens_per_s == pytest.approx(5.0)
    assert stalled.output_tokens_per_s_spread == pytest.approx(2.0)  # 10 tokens/s then none
    restored = LevelResult.from_dict(stalled.to_dict())
    assert (restored.steady_s, restored.output_tokens_per_s_spread) == (10.0, pytest.approx(2.0))


def test_an_empty_steady_window_falls_back_to_the_whole_level() -> None:
    # one worker finished before another ended its warm-up: no moment had every worker recording
    level = summarize_level(2, [streamed(0.0, 0.1, 10)], wall_s=4.0, steady=(3.0, 2.0))
    assert level.output_tokens_per_s == 2.5
    assert math.isnan(level.steady_s) and math.isnan(level.output_tokens_per_s_spread)
    assert level.to_dict()["output_tokens_per_s_spread"] is None


def test_window_tokens_follow_the_servers_usage_count() -> None:
    # chunks that carried text without ids count one each; usage says each carried two
    sample = streamed(0.0, 0.1, 10, usage=20)
    assert sample.tokens_between(0.0, 0.5) == 10.0
