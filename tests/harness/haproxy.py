"""A real HAProxy on loopback, configured by the gateway code, for tests and the benchmark.

The binary is ``$HAPROXY_BIN``, else ``haproxy`` on PATH or in /usr/sbin (Debian's package;
``.ci/run`` installs it). HAProxy runs in master-worker mode with both sockets in a temporary
directory, so the gateway's reload and runtime-API paths are the ones exercised. Members of the
routing table are emulators on 127.0.0.x: nothing here dials a pod IP.
"""

from __future__ import annotations

import dataclasses
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from glm_operator.clients.haproxy import HAProxyRuntime, send
from glm_operator.gateway.haproxy_config import CONFIG_FILE, GatewaySettings
from glm_operator.gateway.proxy import ProxyDriver
from glm_operator.gateway.routes import RoutingTable
from tests.harness.cluster import free_port, haproxy_binary


def check_config(text: str) -> subprocess.CompletedProcess[str]:
    """``haproxy -c`` on a configuration text (the files it names must exist)."""
    with tempfile.NamedTemporaryFile("w", suffix=".cfg") as cfg:
        cfg.write(text)
        cfg.flush()
        return subprocess.run(
            [haproxy_binary(), "-c", "-f", cfg.name], capture_output=True, text=True, timeout=60
        )


class LocalGateway:
    """HAProxy in master-worker mode on 127.0.0.1, driven through a :class:`ProxyDriver`."""

    def __init__(self, workdir: Path, **settings: Any) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.metrics_port = free_port()
        defaults: dict[str, Any] = {
            "config_dir": str(workdir),
            "runtime_socket": str(workdir / "admin.sock"),
            "bind_address": "127.0.0.1",
            "port": self.port,
            "metrics_port": self.metrics_port,
        }
        self.settings = GatewaySettings(**{**defaults, **settings})
        self.master_socket = str(workdir / "master.sock")
        self.runtime = HAProxyRuntime(self.settings.runtime_socket, self.master_socket)
        self.driver = ProxyDriver(self.settings, self.runtime)
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"http://127.0.0.1:{self.port}"

    def with_settings(self, **changes: Any) -> None:
        self.settings = dataclasses.replace(self.settings, **changes)
        self.driver.settings = self.settings

    def start(self, table: RoutingTable | None, timeout: float = 20) -> LocalGateway:
        """Start HAProxy on ``table`` (None: on the files already in the directory, e.g. from a sync)."""
        if table is not None:
            self.driver.write(table)
            self.driver.current = table
        log = (self.workdir / "haproxy.log").open("ab")
        self.proc = subprocess.Popen(
            [haproxy_binary(), "-W", "-db", "-S", self.master_socket, "-f", str(self.workdir / CONFIG_FILE)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = self.log_tail()
                self.stop()
                raise RuntimeError(f"HAProxy did not start:\n{tail}")
            time.sleep(0.05)
        return self

    def log_tail(self) -> str:
        return (self.workdir / "haproxy.log").read_text(errors="replace")[-3000:]

    def ready(self) -> bool:
        """The worker serves and answers its admin socket, and the master CLI takes a reload (it
        may listen some milliseconds after the worker is up)."""
        try:
            with urllib.request.urlopen(self.url + "/healthz", timeout=1) as response:
                serving = bool(response.status == 200) and self.runtime.process_id() is not None
            # 2.6's master CLI keeps the connection open after a command: "quit" closes it.
            return serving and "worker" in send(self.master_socket, "show proc; quit", timeout=1)
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None

    def __enter__(self) -> LocalGateway:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
