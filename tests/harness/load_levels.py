"""Load-test levels for tests of recorded sweeps (the knee, the measured speed, the record end to end)."""

from __future__ import annotations

from glm_operator.planning.speed.knee import LevelResult


def level(c: int, tokens_per_s: float, itl_ms: float, ttft_ms: float = 50.0, errors: int = 0) -> LevelResult:
    return LevelResult(
        concurrency=c,
        requests=4 * c,
        errors=errors,
        wall_s=1.0,
        output_tokens=int(tokens_per_s),
        ttft_p50_s=ttft_ms / 1000,
        ttft_p95_s=ttft_ms / 1000,
        itl_p50_s=itl_ms / 1000,
        itl_p95_s=itl_ms / 1000,
        output_tokens_per_s=tokens_per_s,
        first_error="HTTP 503" if errors else "",
    )


# A replica whose decode stops scaling at 8 running requests (what the vLLM emulator's batch_knee does):
# throughput doubles up to 8, then stays while ITL doubles.
SATURATING = (
    level(1, 125, 8),
    level(2, 250, 8),
    level(4, 500, 8),
    level(8, 1000, 8),
    level(16, 1000, 16),
    level(32, 1000, 32),
)
