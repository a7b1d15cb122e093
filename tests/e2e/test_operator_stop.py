"""A SIGTERM (a rolling update, a drained node) stops the operator cleanly: the Lease is given
back, kopf's thread stops by its flag with no task left for it to wait out, and nothing is logged
as an error on the way out (controller.manager.Manager.stop)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.harness.operator import RunningOperator

from .conftest import E2ECluster
from .test_controller import apply, phase_is, small, wait_for

pytestmark = pytest.mark.e2e

ASYNCIO_COMPLAINTS = (
    "error occurred during closing of asynchronous generator",
    "exception was never retrieved",
    "was destroyed but it is pending",
    "Exception ignored in",
)


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
        stopping = log[log.index("stopping (signal)") :]
        assert "released the lease" in stopping
        # kopf waits up to 5 s for tasks left running when it stops, then cancels them.
        assert "Hung tasks stopping is skipped: no tasks given." in stopping, stopping[-3000:]
        # At debug level a failed reconcile's record carries its traceback (another test's
        # namespace being deleted, say), and kopf logs a retried request at ERROR; what must not
        # appear is an error record once the signal came, nor asyncio's complaints about what
        # was left behind (they come as ERROR records or bare stderr).
        records = re.split(r"\n(?=\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ )", stopping)
        errors = [r for r in records if r.split(" ", 3)[2:3] in (["ERROR"], ["CRITICAL"])]
        assert not errors, errors
        for complaint in ASYNCIO_COMPLAINTS:
            assert complaint not in log, stopping[-3000:]
    finally:
        op.stop()
        operator.start()
