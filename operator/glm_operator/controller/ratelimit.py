"""Retry delays for failed reconciles, as controller-runtime's default rate limiter computes them.

``max(per-key exponential backoff, overall token bucket)``:

- per key: ``base × 2^failures`` (5 ms, 10 ms, 20 ms, … capped at 1000 s), with ±10 % jitter so a
  burst of keys failing together does not retry in lock-step; a success forgets the key;
- overall: a token bucket (10 retries/s, burst 100) spreads a mass failure (apiserver down for
  every key) over time instead of retrying all keys at once.

A server that answers 429 with ``Retry-After`` is never retried earlier than it asked.
Pure: the clock and the random source are arguments.
"""

from __future__ import annotations

import random
from collections.abc import Hashable


class RateLimiter:
    def __init__(
        self,
        base: float = 0.005,
        cap: float = 1000.0,
        qps: float = 10.0,
        burst: int = 100,
        jitter: float = 0.1,
        rng: random.Random | None = None,
    ) -> None:
        self.base, self.cap, self.qps, self.burst, self.jitter = base, cap, qps, burst, jitter
        self.rng = rng or random.Random()
        self._failures: dict[Hashable, int] = {}
        self._tokens = float(burst)
        self._last = 0.0
        self._started = False

    def failures(self, key: Hashable) -> int:
        return self._failures.get(key, 0)

    def when(self, key: Hashable, now: float, retry_after: float | None = None) -> float:
        """Seconds to wait before retrying ``key`` after one more failure."""
        n = self._failures.get(key, 0)
        self._failures[key] = n + 1
        backoff = min(self.cap, self.base * (2.0 ** min(n, 40)))
        backoff *= 1.0 + self.rng.uniform(-self.jitter, self.jitter)
        delay = max(backoff, self._bucket_delay(now))
        if retry_after is not None:
            delay = max(delay, retry_after)
        return min(delay, self.cap * (1.0 + self.jitter))

    def forget(self, key: Hashable) -> None:
        self._failures.pop(key, None)

    def _bucket_delay(self, now: float) -> float:
        """Reserve one token; the wait until it is available."""
        if not self._started:
            self._started, self._last = True, now
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps
