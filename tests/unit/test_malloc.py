"""The operator bounds glibc's malloc arenas, unless the environment already does."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from glm_operator.controller import malloc

CHILD = """
import ctypes, ctypes.util, sys, threading
from glm_operator.controller.malloc import limit_arenas
print(limit_arenas(1), flush=True)
def work():
    blobs = [bytearray(4096) for _ in range(2000)]  # > 512 bytes: glibc malloc, not pymalloc
    barrier.wait()
barrier = threading.Barrier(9)
threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads: t.start()
barrier.wait()
ctypes.CDLL(ctypes.util.find_library("c")).malloc_stats()  # one "Arena N:" block per arena, on stderr
for t in threads: t.join()
"""


def _run(env: dict[str, str]) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True, timeout=60
    )
    arenas = sum(1 for line in out.stderr.splitlines() if line.startswith("Arena "))
    return [*out.stdout.split(), str(arenas)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_threads_share_the_bounded_arena() -> None:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    bounded = _run(env)
    assert bounded[0] == "True"
    unbounded = _run({**env, "MALLOC_ARENA_MAX": "16"})
    assert unbounded[0] == "False"  # the environment's value wins, and is left alone
    assert int(bounded[1]) == 1, bounded  # 9 threads allocated, all in the main arena
    assert int(unbounded[1]) > 1, unbounded


def test_the_environment_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert malloc.limit_arenas() is False
