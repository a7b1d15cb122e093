"""Bound glibc's malloc arenas in the operator process.

glibc gives each thread that contends for the heap its own arena, up to 8 per core, and never
hands an arena's free pages back between bursts. The operator runs ~40 threads (workers, apply
lanes, planning, tails); every one that allocates a JSON body or a big dict grows its own arena,
so the resident set after a burst is mostly free memory spread over arenas. Two arenas keep
allocation contention low (the GIL serialises most of it anyway) and the memory in one place.

An operator started with ``MALLOC_ARENA_MAX`` in its environment keeps that value (glibc reads
it itself): that is how a benchmark compares the two.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

M_ARENA_MAX = -8  # <malloc.h>
DEFAULT_ARENAS = 2

log = logging.getLogger(__name__)


def limit_arenas(arenas: int = DEFAULT_ARENAS) -> bool:
    """Set glibc's arena bound before the operator starts its threads. True when it was set;
    False on a libc without ``mallopt`` (musl, macOS) or when the environment already says."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = bool(mallopt(M_ARENA_MAX, arenas))
    if not ok:
        log.debug("mallopt(M_ARENA_MAX, %d) refused", arenas)
    return ok
