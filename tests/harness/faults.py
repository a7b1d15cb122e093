"""Faults injected into the local control plane: the apiserver goes away and comes back.

Used by the e2e tests of the controller's error handling. The kube-apiserver is killed (the
whole process group) and, after a pause, started again with exactly the command line, working
directory and environment it had, so it serves the same port with the same certificates.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from tests.harness.cluster import LocalCluster, stop_process_group

APISERVER = "kube-apiserver"


def _proc(pid: int, what: str) -> bytes:
    return Path(f"/proc/{pid}/{what}").read_bytes()


class ApiserverOutage:
    """Stop the cluster's kube-apiserver now; ``restore()`` starts it again and waits until ready."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        pid = cluster._pids()[APISERVER]
        self.argv = [a.decode() for a in _proc(pid, "cmdline").split(b"\0") if a]
        env_items = [e.decode(errors="replace") for e in _proc(pid, "environ").split(b"\0") if e]
        self.env = dict(item.split("=", 1) for item in env_items if "=" in item)
        self.cwd = os.readlink(f"/proc/{pid}/cwd")
        stop_process_group(pid, timeout=10)
        self.stopped_at = time.monotonic()

    def restore(self, timeout: float = 60.0) -> float:
        """Start the apiserver again; returns the monotonic time it answered /readyz."""
        log = open(self.cluster.state_dir / "logs" / f"{APISERVER}.log", "ab")  # noqa: SIM115 - child's
        proc = subprocess.Popen(
            self.argv,
            cwd=self.cwd,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        state = self.cluster._read_state()
        pids = dict(state.get("pids") or {})  # type: ignore[call-overload]
        pids[APISERVER] = proc.pid
        state["pids"] = pids
        self.cluster._write_state(state)
        server, token = self.cluster.server_url(), self.cluster.token()
        assert server and token
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{APISERVER} exited with {proc.returncode} on restart")
            if self.cluster._apiserver_ready(server, token, timeout=1.0):
                return time.monotonic()
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)
        raise RuntimeError(f"{APISERVER} not ready {timeout:.0f} s after restart")
