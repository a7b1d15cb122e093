"""Per-GLMDeployment timing stamps for the controller bench (off unless ``GLM_OPERATOR_TIMELINE_FILE``
is set, as ``memory``'s tracemalloc diagnostics are).

The bench knows when it sent a create and when its own watches saw the GLMDeployment and its
child Deployment; only the operator knows what happened in between. With the variable set, the
operator appends one JSON line ``[namespace, name, stage, time.monotonic()]`` per stage of a new
spec: ``handler`` (its watch handler saw a spec not planned yet), ``take`` (a worker took the
key), ``sent`` and ``returned`` (a workload create left and came back, in its API thread).
``CLOCK_MONOTONIC`` is one clock for every process of the machine, so the bench lines the two
up (``controller_bench.py --timeline``). Bench run 74's timeline found where a new spec's second
went (the handler ran late, the POST waited in the client, the let-go status writes took the
workers' tail slots); no metric showed it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

TIMELINE_ENV = "GLM_OPERATOR_TIMELINE_FILE"
_lock = threading.Lock()
_out: TextIO | None = None
_path: str | None = os.environ.get(TIMELINE_ENV) or None


def enabled() -> bool:
    return _path is not None


def stamp(key: tuple[str, str], stage: str) -> None:
    """Record that ``key`` reached ``stage`` now (thread-safe; nothing when disabled)."""
    global _out
    if _path is None:
        return
    line = json.dumps([key[0], key[1], stage, time.monotonic()])
    with _lock:
        if _out is None:
            _out = open(_path, "a", buffering=1)  # noqa: SIM115 - kept open for the process
        _out.write(line + "\n")


def timed_write(key: tuple[str, str], write: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``write`` stamping ``sent`` and ``returned`` for ``key`` around the request."""

    def traced(obj: Any) -> Any:
        stamp(key, "sent")
        try:
            return write(obj)
        finally:
            stamp(key, "returned")

    return traced


def configure(path: str | None) -> None:
    """For tests: write to ``path`` from now on (None: off)."""
    global _path, _out
    with _lock:
        if _out is not None:
            _out.close()
        _path, _out = path, None
