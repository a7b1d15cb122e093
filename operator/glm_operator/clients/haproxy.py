"""HAProxy's runtime API (the admin stats socket) and master CLI, over a local socket.

Each call opens the socket, sends one or more commands separated by ``;`` and reads until HAProxy
closes the connection (non-interactive mode). Addresses are a Unix socket path, or
``host:port`` for a TCP socket (tests on loopback).
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass

#: Commands sent in one connection (HAProxy reads one line; keep it well below its buffer).
_BATCH = 50
_ERROR_PREFIXES = ("Unknown command", "No such", "Require ", "Permission denied", "Invalid")


class HAProxyError(RuntimeError):
    """HAProxy refused a runtime command."""


def _connect(address: str, timeout: float) -> socket.socket:
    if address.startswith("/") or address.startswith("./"):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        sock.connect(address)
        return sock
    host, _, port = address.rpartition(":")
    return socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)


def send(address: str, command: str, timeout: float = 10.0) -> str:
    """Send one command line (may hold several commands joined by ``;``); return the answer."""
    with _connect(address, timeout) as sock:
        sock.sendall(command.encode() + b"\n")
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


@dataclass(frozen=True)
class KeyCounters:
    """One entry of the per-key stick table."""

    client: str
    requests_total: int
    request_rate_per_minute: int
    concurrent_requests: int
    rejected_total: int
    tokens_total: int = 0  # usage of the answers (gpc1; counted under a tokens-per-minute limit)
    tokens_per_minute: int = 0


_TABLE_ENTRY = re.compile(r"key=(?P<key>\S+) use=(?P<use>\d+) .*")
_FIELD = re.compile(r"(\w+)(?:\(\d+\))?=(\d+)")


def parse_table(text: str) -> list[KeyCounters]:
    """Entries of ``show table <name>``: key, trackers in use, and the stored counters."""
    entries = []
    for line in text.splitlines():
        match = _TABLE_ENTRY.search(line)
        if match is None:
            continue
        fields = {name: int(value) for name, value in _FIELD.findall(line[match.end("key") :])}
        entries.append(
            KeyCounters(
                client=match.group("key"),
                requests_total=fields.get("http_req_cnt", 0),
                request_rate_per_minute=fields.get("http_req_rate", 0),
                concurrent_requests=int(match.group("use")),
                rejected_total=fields.get("gpc0", 0),
                tokens_total=fields.get("gpc1", 0),
                tokens_per_minute=fields.get("gpc1_rate", 0),
            )
        )
    return entries


class HAProxyRuntime:
    """The admin socket of a running HAProxy (and optionally its master CLI, to reload it)."""

    def __init__(self, admin_socket: str, master_socket: str | None = None, timeout: float = 10.0) -> None:
        self.admin_socket = admin_socket
        self.master_socket = master_socket
        self.timeout = timeout

    def execute(self, commands: Sequence[str]) -> None:
        """Run runtime commands in order; raise :class:`HAProxyError` naming any refused one."""
        for start in range(0, len(commands), _BATCH):
            batch = list(commands[start : start + _BATCH])
            answer = send(self.admin_socket, "; ".join(batch), self.timeout)
            refused = [line for line in answer.splitlines() if line.startswith(_ERROR_PREFIXES)]
            if refused:
                raise HAProxyError(f"HAProxy refused {batch}: {'; '.join(refused)}")

    def process_id(self) -> int | None:
        """PID of the worker answering the admin socket; None when it does not answer."""
        try:
            answer = send(self.admin_socket, "show info", self.timeout)
        except OSError:
            return None
        match = re.search(r"^Pid: (\d+)$", answer, re.MULTILINE)
        return int(match.group(1)) if match else None

    def key_counters(self, table: str = "per_key") -> list[KeyCounters]:
        return parse_table(send(self.admin_socket, f"show table {table}", self.timeout))

    def reload(self, wait_seconds: float = 10.0) -> None:
        """Graceful reload through the master CLI; waits until a new worker answers the admin socket."""
        if self.master_socket is None:
            raise HAProxyError("no master socket configured: cannot reload HAProxy")
        before = self.process_id()
        send(self.master_socket, "reload", self.timeout)
        deadline = time.monotonic() + wait_seconds
        while time.monotonic() < deadline:
            pid = self.process_id()
            if pid is not None and pid != before:
                return
            time.sleep(0.05)
        raise HAProxyError(f"HAProxy did not start a new worker within {wait_seconds:.0f}s of a reload")
