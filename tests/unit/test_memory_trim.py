"""The quiet trimmer: glibc's malloc_trim once a burst of work is over, never during one."""

from __future__ import annotations

import asyncio
import ctypes
import subprocess
import sys
import tracemalloc
from pathlib import Path

from glm_operator.controller import memory


def test_trim_gives_freed_heap_back_to_the_os() -> None:
    """Many freed malloc chunks held in place by a few survivors stay resident until the trim."""
    assert memory._malloc_trim is not None, "glibc's malloc_trim (the operator image is Debian)"
    malloc, free = ctypes.CDLL("libc.so.6").malloc, ctypes.CDLL("libc.so.6").free
    malloc.restype, free.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
    chunks = [malloc(64 * 1024 - 64) for _ in range(3000)]  # ~190 MiB below the mmap threshold
    for chunk in chunks:
        ctypes.memset(chunk, 1, 64 * 1024 - 64)
    for chunk in chunks[:-1]:  # the last one pins the heap's top: no automatic trim
        free(chunk)
    before = memory.rss_bytes()
    assert memory.trim()
    after = memory.rss_bytes()
    free(chunks[-1])
    assert before - after > 100 * 2**20, (before, after)


def test_trims_once_after_work_and_a_quiet_period_never_during_work() -> None:
    state = {"taken": 0, "quiet": True}
    trims: list[int] = []

    async def release() -> None:
        trims.append(state["taken"])

    trimmer = memory.QuietTrimmer(
        quiet=lambda: bool(state["quiet"]),
        work_done=lambda: int(state["taken"]),
        period=0.01,
        release=release,
    )

    async def scenario() -> None:
        task = asyncio.create_task(trimmer.run())
        await asyncio.sleep(0.05)
        assert trims == [], "no work yet: nothing to trim"
        for _ in range(10):  # a burst: work in every period
            state["taken"] += 5
            state["quiet"] = False
            await asyncio.sleep(0.01)
        assert trims == [], "never during a burst"
        state["quiet"] = True
        for _ in range(500):  # a few periods; generous for a loaded machine
            if trims:
                break
            await asyncio.sleep(0.01)
        assert trims == [50], "once after the burst"
        await asyncio.sleep(0.05)
        assert trims == [50], "not again while idle"
        task.cancel()

    asyncio.run(scenario())


TRACE_PROBE = """
import os, signal, sys, tracemalloc
from glm_operator.controller import memory
memory.trace_on_signal(sys.argv[1])
before = [bytearray(1000) for _ in range(1000)]  # not traced: before the first signal
os.kill(os.getpid(), signal.SIGUSR2)
assert tracemalloc.is_tracing()
kept = [bytearray(1000) for _ in range(2000)]  # traced, still allocated at the snapshot
os.kill(os.getpid(), signal.SIGUSR2)
"""


def test_the_first_signal_starts_tracing_and_the_next_writes_what_is_still_allocated(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-c", TRACE_PROBE, str(tmp_path)], check=True, timeout=60)
    snap = tracemalloc.Snapshot.load(str(tmp_path / "snapshot-1.pickle"))
    by_line = {stat.traceback[0].lineno: stat.size for stat in snap.statistics("lineno")}
    lines = TRACE_PROBE.split("\n")
    kept = next(i for i, line in enumerate(lines, 1) if line.startswith("kept ="))
    before = next(i for i, line in enumerate(lines, 1) if line.startswith("before ="))
    assert by_line.get(kept, 0) >= 2000 * 1000
    assert before not in by_line  # allocated before tracing started
