"""Faults injected into the local control plane: the apiserver goes away and comes back.

Used by the e2e tests of the controller's error handling. The kube-apiserver is killed (the
whole process group) and, after a pause, started again with exactly the command line, working
directory and environment it had, so it serves the same port with the same certificates.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from tests.harness.cluster import LocalCluster, free_port, stop_process_group

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


class SecondApiserver:
    """A second kube-apiserver on the same etcd, as in a highly available control plane: the same
    command line on another port (same certificates and tokens). While the first is away, clients
    of this one go on reading and writing the same objects. ``kubectl`` runs against it."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        pid = cluster._pids()[APISERVER]
        argv = [a.decode() for a in _proc(pid, "cmdline").split(b"\0") if a]
        env_items = [e.decode(errors="replace") for e in _proc(pid, "environ").split(b"\0") if e]
        self.port = free_port()
        self.argv = [f"--secure-port={self.port}" if a.startswith("--secure-port=") else a for a in argv]
        self.env = dict(item.split("=", 1) for item in env_items if "=" in item)
        self.cwd = os.readlink(f"/proc/{pid}/cwd")
        self.kubeconfig = cluster.state_dir / "kubeconfig-second-apiserver"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> None:
        log = open(self.cluster.state_dir / "logs" / "kube-apiserver-second.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            self.argv, cwd=self.cwd, env=self.env, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        log.close()
        config = json.loads(self.cluster.kubeconfig.read_text())
        server = f"https://127.0.0.1:{self.port}"
        config["clusters"][0]["cluster"]["server"] = server
        self.kubeconfig.write_text(json.dumps(config))
        token = self.cluster.token()
        assert token
        deadline = time.monotonic() + timeout
        while not self.cluster._apiserver_ready(server, token, timeout=1.0):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the second {APISERVER} did not start (see its log)")
            time.sleep(0.2)

    def kubectl(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.cluster.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=input, capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            stop_process_group(self.proc.pid, timeout=10)
