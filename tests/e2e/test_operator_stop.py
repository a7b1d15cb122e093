"""A SIGTERM (a rolling update, a drained node) stops the operator cleanly: the Lease is given
back, its cleanup leaves no task for kopf to wait out, and nothing is logged as an error on the way
out (kopf's nested watch generators are closed in order: glm_operator.controller.event_loop)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from glm_operator.testing.operator import RunningOperator

from .conftest import E2ECluster
from .test_controller import apply, phase_is, small, wait_for

pytestmark = pytest.mark.e2e


def test_sigterm_releases_the_lease_and_leaves_no_task_or_error_behind(
    cluster: E2ECluster, operator: RunningOperator, ns: str, tmp_path: Path
) -> None:
    operator.stop()  # this test's replica must lead
    op = RunningOperator(cluster.local, tmp_path / "op")
    op.workdir.mkdir()
    try:
        op.install()
        op.start("--log-level", "debug")  # kopf says at debug level which tasks it had to wait out
        apply(cluster, ns, small("stop"))
        wait_for(phase_is(cluster, ns, "stop", "Ready"), 60, "Ready")
        apply(cluster, ns, small("stop", contextLength=4096))  # work in flight at the signal
        assert op.proc is not None
        proc = op.proc
        started = time.monotonic()
        op.stop()
        print(f"\nSIGTERM to exit: {time.monotonic() - started:.2f} s")  # a figure, not a bound
        assert proc.returncode == 0
        log = op.log_path.read_text(errors="replace")
        stopping = log[log.index("Signal SIGTERM is received") :]
        assert "released the lease" in stopping
        # kopf waits up to 5 s for tasks left running after the cleanup, then cancels them;
        # before the fix its own stop-flag waiter was one on every signal.
        assert "Hung tasks stopping is skipped: no tasks given." in stopping, stopping[-3000:]
        assert "Traceback" not in log and "error occurred during closing" not in log, stopping[-3000:]
    finally:
        op.stop()
        operator.start()
