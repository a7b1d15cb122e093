"""Leader election under real conditions: a leader frozen past its Lease, and a clean hand-over.

Two operator processes with the chart's ServiceAccount; the old leader is frozen with SIGSTOP
(as a long GC pause, a stalled node or a container freeze would), the standby takes over, then
the old one resumes. It must not write anything and must exit non-zero.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.harness.operator import OPERATOR_NAMESPACE

from .conftest import E2ECluster, RunningOperator
from .test_controller import apply, children, get, glmd, phase_is, small, vllm_args, wait_for

pytestmark = pytest.mark.e2e
OLD_IMAGE = "example.invalid/vllm-old:1"  # only the first replica renders this image


def lease(cluster: E2ECluster) -> dict[str, Any]:
    out = cluster.kubectl("get", "lease", "glm-operator", "-n", OPERATOR_NAMESPACE, "-o", "json")
    return dict(json.loads(out.stdout)["spec"])


def versions(cluster: E2ECluster, ns: str) -> dict[str, str]:
    """resourceVersion of every object the operator writes in ``ns`` (and how many Events)."""
    out = {
        f"glmd/{o['metadata']['name']}": o["metadata"]["resourceVersion"]
        for o in get(cluster, ns, "glmd")["items"]
    }
    for kind in ("deployments", "services"):
        for o in get(cluster, ns, kind)["items"]:
            out[f"{kind}/{o['metadata']['name']}"] = o["metadata"]["resourceVersion"]
    out["events"] = str(len(get(cluster, ns, "events")["items"]))
    return out


def test_a_leader_frozen_past_its_lease_writes_nothing_after_resuming_and_exits(
    cluster: E2ECluster, operator: RunningOperator, ns: str, tmp_path: Path
) -> None:
    operator.stop()
    old = RunningOperator(cluster.local, tmp_path / "old")
    new = RunningOperator(cluster.local, tmp_path / "new")
    try:
        for op in (old, new):
            op.workdir.mkdir()
            op.install()
        old.start("--default-image", OLD_IMAGE)
        wait_for(lambda: "became leader" in old.log_tail(), 30, "first replica leads")
        old_identity = lease(cluster)["holderIdentity"]
        new.start()
        wait_for(lambda: "started: " in new.log_tail(20000), 30, "standby up")
        apply(cluster, ns, small("frozen"))
        wait_for(phase_is(cluster, ns, "frozen", "Ready"), 60, "Ready under the first replica")
        (dep,) = children(cluster, ns, "frozen")
        assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == OLD_IMAGE

        assert old.proc is not None
        os.killpg(old.proc.pid, signal.SIGSTOP)
        frozen_at = time.monotonic()
        # While the leader is frozen, a spec change only the new leader can act on.
        apply(cluster, ns, small("frozen", contextLength=4096))
        wait_for(lambda: "became leader" in new.log_tail(20000), 40, "the standby takes over")
        took_over = time.monotonic() - frozen_at
        obj = wait_for(phase_is(cluster, ns, "frozen", "Ready"), 60, "new spec Ready under the new leader")
        assert obj["metadata"]["generation"] == 2
        (dep,) = children(cluster, ns, "frozen")
        assert dep["spec"]["template"]["spec"]["containers"][0]["image"] != OLD_IMAGE
        assert "4096" in vllm_args(dep)
        time.sleep(3)  # the new leader has settled: it has nothing left to write
        before = versions(cluster, ns)

        os.killpg(old.proc.pid, signal.SIGCONT)
        code = old.proc.wait(timeout=40)
        time.sleep(3)
        after = versions(cluster, ns)
        (dep,) = children(cluster, ns, "frozen")
        log = old.log_tail(200_000)
        print(f"standby took over {took_over:.1f} s after the freeze; old leader exited {code}")
        assert code != 0, log[-3000:]
        assert "lost leadership" in log
        assert after == before, "an object changed after the old leader resumed"
        assert dep["spec"]["template"]["spec"]["containers"][0]["image"] != OLD_IMAGE
        assert glmd(cluster, ns, "frozen")["status"]["observedGeneration"] == 2
        assert lease(cluster)["holderIdentity"] not in ("", old_identity)

        # A clean shutdown hands the Lease over at once: its holder is emptied.
        new.stop()
        assert lease(cluster)["holderIdentity"] == ""
    finally:
        old.stop(sig=signal.SIGKILL)
        new.stop()
        operator.start()
