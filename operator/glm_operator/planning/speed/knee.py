"""Load-test results: latency percentiles and throughput per concurrency, and the knee (pure).

``summarize_level`` turns one level of ``glm-operator loadtest`` (the I/O is in
:mod:`glm_operator.clients.openai_load`) into TTFT and ITL percentiles and output tokens/s; ``find_knee``
finds the first level from which more concurrency buys latency rather than throughput. The performance
model applies the same rule to its predictions, and the autoscaler aims each replica at that knee.
docs/operations.md ("Load-testing a deployment") defines the figures and the rule.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_MIN_THROUGHPUT_GAIN = 0.10
DEFAULT_MIN_ITL_RISE = 0.20


@dataclass(frozen=True)
class RequestSample:
    """One streamed request. ``ttft_s`` is None when no token came (an error, an empty answer)."""

    ttft_s: float | None
    itl_s: tuple[float, ...]
    output_tokens: int
    latency_s: float
    error: str = ""
    # (clock time, tokens) of each streamed chunk that carried tokens: what the steady window counts
    arrivals: tuple[tuple[float, int], ...] = ()

    def tokens_between(self, start_s: float, end_s: float) -> float:
        """Output tokens that arrived in [start_s, end_s), scaled to the server's count (``output_tokens``,
        from usage) when the chunks carried a different number."""
        streamed = sum(tokens for _, tokens in self.arrivals)
        if not streamed:
            return 0.0
        inside = sum(tokens for at, tokens in self.arrivals if start_s <= at < end_s)
        return inside * self.output_tokens / streamed


@dataclass(frozen=True)
class LevelResult:
    """One concurrency of the sweep: percentiles in seconds, throughput in output tokens per second."""

    concurrency: int
    requests: int
    errors: int
    wall_s: float
    output_tokens: int
    ttft_p50_s: float
    ttft_p95_s: float
    itl_p50_s: float
    itl_p95_s: float
    output_tokens_per_s: float
    first_error: str = ""
    # the steady window's length (NaN: none, and output_tokens_per_s is over the whole level) and the
    # difference of output tokens/s between its two halves over their mean (NaN without a window)
    steady_s: float = math.nan
    output_tokens_per_s_spread: float = math.nan
    warmup_requests: int = 0  # sent before the recorded ones, left out of every figure

    def to_dict(self) -> dict[str, Any]:
        def num(value: float) -> float | None:
            return None if math.isnan(value) else round(value, 6)

        return {
            "concurrency": self.concurrency,
            "requests": self.requests,
            "errors": self.errors,
            "wall_s": round(self.wall_s, 3),
            "output_tokens": self.output_tokens,
            "ttft_p50_s": num(self.ttft_p50_s),
            "ttft_p95_s": num(self.ttft_p95_s),
            "itl_p50_s": num(self.itl_p50_s),
            "itl_p95_s": num(self.itl_p95_s),
            "output_tokens_per_s": round(self.output_tokens_per_s, 2),
            "first_error": self.first_error,
            "steady_s": num(self.steady_s),
            "output_tokens_per_s_spread": num(self.output_tokens_per_s_spread),
            "warmup_requests": self.warmup_requests,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LevelResult:
        def num(key: str) -> float:
            value = data.get(key)
            return math.nan if value is None else float(value)

        return cls(
            concurrency=int(data["concurrency"]),
            requests=int(data.get("requests", 0)),
            errors=int(data.get("errors", 0)),
            wall_s=float(data.get("wall_s", 0.0)),
            output_tokens=int(data.get("output_tokens", 0)),
            ttft_p50_s=num("ttft_p50_s"),
            ttft_p95_s=num("ttft_p95_s"),
            itl_p50_s=num("itl_p50_s"),
            itl_p95_s=num("itl_p95_s"),
            output_tokens_per_s=float(data["output_tokens_per_s"]),
            first_error=str(data.get("first_error", "")),
            steady_s=num("steady_s"),
            output_tokens_per_s_spread=num("output_tokens_per_s_spread"),
            warmup_requests=int(data.get("warmup_requests", 0)),
        )


@dataclass(frozen=True)
class Knee:
    """The concurrency beyond which throughput stops rising while ITL climbs; ``reason`` in words."""

    concurrency: int | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "reason": self.reason}


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by nearest rank; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def summarize_level(
    concurrency: int,
    samples: Iterable[RequestSample],
    wall_s: float,
    steady: tuple[float, float] | None = None,
    warmup_requests: int = 0,
) -> LevelResult:
    """One level's percentiles and throughput (module docstring). ``steady`` is the window (clock times)
    during which every worker was busy with a recorded request: output tokens/s are the tokens that
    arrived in it over its length, and its two halves give the spread. Without one (or an empty one) they
    are every token over ``wall_s``."""
    samples = list(samples)
    ok = [s for s in samples if not s.error]
    failed = [s for s in samples if s.error]
    ttfts = [s.ttft_s for s in ok if s.ttft_s is not None]
    itls = [gap for s in ok for gap in s.itl_s]
    tokens = sum(s.output_tokens for s in ok)
    rate = tokens / wall_s if wall_s > 0 else 0.0
    steady_s = spread = math.nan
    if steady is not None and steady[1] > steady[0]:
        start, end = steady
        middle = (start + end) / 2
        halves = [
            sum(s.tokens_between(a, b) for s in ok) / (b - a) for a, b in ((start, middle), (middle, end))
        ]
        rate = sum(halves) / 2
        steady_s = end - start
        spread = abs(halves[0] - halves[1]) / rate if rate > 0 else math.nan
    return LevelResult(
        concurrency=concurrency,
        requests=len(samples),
        errors=len(failed),
        wall_s=wall_s,
        output_tokens=tokens,
        ttft_p50_s=percentile(ttfts, 0.50),
        ttft_p95_s=percentile(ttfts, 0.95),
        itl_p50_s=percentile(itls, 0.50),
        itl_p95_s=percentile(itls, 0.95),
        output_tokens_per_s=rate,
        first_error=failed[0].error if failed else "",
        steady_s=steady_s,
        output_tokens_per_s_spread=spread,
        warmup_requests=warmup_requests,
    )


def _rise(before: float, after: float) -> float:
    """Relative change from ``before`` to ``after`` (inf from 0 to more, NaN when unknown)."""
    if math.isnan(before) or math.isnan(after):
        return math.nan
    if before <= 0:
        return math.inf if after > 0 else 0.0
    return after / before - 1.0


def find_knee(
    levels: Sequence[LevelResult],
    min_throughput_gain: float = DEFAULT_MIN_THROUGHPUT_GAIN,
    min_itl_rise: float = DEFAULT_MIN_ITL_RISE,
) -> Knee:
    """The knee of a sweep by the rule of the module docstring."""
    ordered = sorted(levels, key=lambda level: level.concurrency)
    if len(ordered) < 2:
        return Knee(None, "one concurrency level is not a sweep: give two or more")
    for i, (low, high) in enumerate(itertools.pairwise(ordered)):
        if low.errors:
            before = f"concurrency {ordered[i - 1].concurrency}" if i else "no level"
            return Knee(
                ordered[i - 1].concurrency if i else None,
                f"{low.errors} of {low.requests} requests failed at concurrency {low.concurrency} "
                f"({low.first_error}); the search stops before it: {before}",
            )
        gain = _rise(low.output_tokens_per_s, high.output_tokens_per_s)
        itl = _rise(low.itl_p50_s, high.itl_p50_s)
        if high.errors == 0 and gain < min_throughput_gain and itl > min_itl_rise:
            return Knee(
                low.concurrency,
                f"from concurrency {low.concurrency} to {high.concurrency} output tokens/s rise "
                f"{gain * 100:+.1f} % (< {min_throughput_gain * 100:g} %) while ITL p50 rises "
                f"{itl * 100:+.1f} % (> {min_itl_rise * 100:g} %)",
            )
    last = ordered[-1]
    if last.errors:
        return Knee(
            ordered[-2].concurrency,
            f"{last.errors} of {last.requests} requests failed at concurrency {last.concurrency} "
            f"({last.first_error}); the search stops before it: concurrency {ordered[-2].concurrency}",
        )
    return Knee(
        None,
        f"not reached up to concurrency {last.concurrency}: throughput still rises by "
        f">= {min_throughput_gain * 100:g} % or ITL p50 by <= {min_itl_rise * 100:g} % at every step; "
        "raise the top concurrency",
    )
