"""Give the heap a burst of work freed back to the OS (glibc's ``malloc_trim``), once it is over.

CPython returns its small-object arenas itself, but larger buffers (apiserver response bodies,
JSON for applies, rendered manifests) come from glibc's malloc, which keeps freed chunks in the
middle of its heaps resident. After a burst (a resync re-applies every child; 200 GLMDeployments
created at once) the operator's RSS stays at the burst's peak although the memory is free.
``malloc_trim(0)`` releases those pages (glibc ≥ 2.8 trims every arena, not only the top).

The trim runs when the work queue has been quiet for a whole period after some work: at most once
per period, never during a burst; 8 ms for a 280 MiB heap with 50 MiB free (1 ms when nothing is
free), in a thread. On a libc without ``malloc_trim`` (musl) it does nothing. Before it, the
operator lets go of the threads and pooled connections the burst grew (``Operator.release_idle``).

``shrink_tls_read_buffers``: every asyncio TLS connection (kopf's watch streams) holds a read
buffer of its own, 256 KiB by default, for as long as it is open.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
from collections.abc import Awaitable, Callable

from glm_operator.controller import metrics

log = logging.getLogger(__name__)

TRIM_PERIOD_SECONDS = 30.0
# A TLS record holds at most 16 KiB; a read of 64 KiB takes several at once.
TLS_READ_BUFFER_BYTES = 64 * 1024


def shrink_tls_read_buffers(size: int = TLS_READ_BUFFER_BYTES) -> None:
    """Give asyncio's TLS connections a read buffer of ``size`` bytes instead of 256 KiB.

    ``asyncio.sslproto.SSLProtocol`` allocates (and zero-fills, so it is resident) a buffer of
    ``max_size`` bytes per connection when it opens, and reads the socket into it. kopf keeps a
    watch stream open per resource and, with namespace patterns, per namespace: 77 streams in the
    controller bench (10 namespaces), about 17 MiB of RSS at 256 KiB each (measured: 220 KiB less
    per connection at 64 KiB). Only connections opened afterwards are affected; call it before
    kopf starts. A larger response is read in more pieces, as any socket read is."""
    from asyncio import sslproto

    if getattr(sslproto.SSLProtocol, "max_size", 0) > size:
        sslproto.SSLProtocol.max_size = size


def _load_malloc_trim() -> Callable[[int], int] | None:
    try:
        trim: Callable[[int], int] = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


_malloc_trim = _load_malloc_trim()


def rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def trim() -> bool:
    """Release free heap pages to the OS; whether glibc gave any back. The RSS it saved is
    counted in ``glm_operator_memory_trimmed_bytes_total``."""
    if _malloc_trim is None:
        return False
    before = rss_bytes()
    released = bool(_malloc_trim(0))
    saved = max(0, before - rss_bytes())
    metrics.MEMORY_TRIMMED.inc(saved)
    log.debug("malloc_trim: RSS %.1f MiB -> %.1f MiB", before / 2**20, (before - saved) / 2**20)
    return released


TRACE_DIR_ENV = "GLM_OPERATOR_TRACEMALLOC_DIR"


def trace_on_signal(directory: str, frames: int = 8) -> None:
    """Diagnostics (off unless ``GLM_OPERATOR_TRACEMALLOC_DIR`` is set): the first SIGUSR2 starts
    tracing Python allocations, each later one writes a ``tracemalloc`` snapshot of what is still
    allocated since then into ``directory`` (``snapshot-N.pickle``). Tracing from a signal, not
    from start-up, keeps a burst at full speed and shows what a later phase (a resync) leaves
    behind; tracing slows allocation several fold while it is on."""
    import itertools
    import signal
    import tracemalloc

    numbers = itertools.count(1)

    def on_signal(signum: int, frame: object) -> None:
        if not tracemalloc.is_tracing():
            tracemalloc.start(frames)
            log.warning("tracemalloc started")
            return
        path = os.path.join(directory, f"snapshot-{next(numbers)}.pickle")
        tracemalloc.take_snapshot().dump(path)
        log.warning("tracemalloc snapshot written to %s", path)

    signal.signal(signal.SIGUSR2, on_signal)


async def trim_in_thread() -> None:
    await asyncio.to_thread(trim)


class QuietTrimmer:
    """Calls ``release`` (by default ``trim``, in a thread) once the queue has done some work and
    then been quiet for a period."""

    def __init__(
        self,
        quiet: Callable[[], bool],
        work_done: Callable[[], int],
        period: float = TRIM_PERIOD_SECONDS,
        release: Callable[[], Awaitable[None]] = trim_in_thread,
    ) -> None:
        self.quiet, self.work_done, self.period, self.release = quiet, work_done, period, release

    async def run(self) -> None:
        trimmed_at = self.work_done()  # start-up's own allocations are not a burst
        previous = trimmed_at
        while True:
            await asyncio.sleep(self.period)
            done = self.work_done()
            # Quiet now and through the whole period (no key taken since the last look).
            if done != trimmed_at and done == previous and self.quiet():
                try:
                    await self.release()
                except Exception:  # never stops the trimmer, never reaches the operator
                    log.warning("releasing idle memory failed", exc_info=True)
                trimmed_at = done
            previous = done
