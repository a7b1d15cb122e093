"""How a failed reconcile is retried: re-added after its backoff, one log line per failure. And
how a periodic loop's step fails: one log line, retried at the loop's next tick."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable
from typing import TypeVar

from glm_operator.clients.kube import NotLeader, summarize_api_error
from glm_operator.controller.workqueue import Key, WorkQueue

log = logging.getLogger(__name__)
K = TypeVar("K", bound=Hashable)


def retry_failed(queue: WorkQueue[K], key: K, what: str, exc: BaseException) -> float:
    """Re-add a failed key after its backoff (no earlier than a 429's ``Retry-After``); one log
    line per failure, the traceback at debug level. Returns the delay."""
    if isinstance(
        exc, NotLeader
    ):  # the Lease was lost: it waits at the leadership gate (or the process exits)
        return queue.add_rate_limited(key)
    summary = summarize_api_error(exc)
    delay = queue.add_rate_limited(key, summary.retry_after)
    level = logging.INFO if summary.status == 409 else logging.WARNING
    asked = f" (Retry-After {summary.retry_after:g} s)" if summary.retry_after is not None else ""
    log.log(level, "%s %s failed: %s; retry in %.2f s%s", what, _name(key), summary.line(), delay, asked)
    log.debug("%s %s failed", what, _name(key), exc_info=exc)
    return delay


def _name(key: Hashable) -> str:
    return "/".join(key) if isinstance(key, tuple) else str(key)


async def bounded_step(
    concurrency: asyncio.Semaphore,
    step: Callable[[Key], Awaitable[None]],
    key: Key,
    what: str,
    logger: logging.Logger,
) -> None:
    """``step(key)`` holding ``concurrency``, for a loop that runs it again at its next tick: a
    failure is one warning line on ``logger`` (the traceback at debug level), never raised."""
    async with concurrency:
        try:
            await step(key)
        except Exception as exc:
            logger.warning("%s for %s/%s failed: %s", what, *key, exc)
            logger.debug("%s for %s/%s failed", what, *key, exc_info=True)
