"""What a burst leaves behind is let go once the operator is quiet: the threads of the default
executor and the pooled apiserver connections (``Operator.release_idle``); and asyncio's TLS
connections (kopf's watch streams) read into a 64 KiB buffer, not 256 KiB
(``memory.shrink_tls_read_buffers``). Against a real TLS server on loopback."""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import threading
from asyncio import sslproto
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s

from glm_operator.clients.kube import KubeClient
from glm_operator.controller import memory
from glm_operator.controller.config import OperatorConfig
from glm_operator.controller.runtime import Operator

# A keep-alive HTTPS server: every request takes 0.3 s, so concurrent requests each need a
# connection (and a thread) of their own.
SERVER = """
import http.server, ssl, sys, time
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        time.sleep(0.3)
        body = b"x" * int(self.path.rsplit("/", 1)[-1] or 2) if self.path.startswith("/bytes/") else b"{}"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
context.load_cert_chain(sys.argv[1], sys.argv[2])
server.socket = context.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    """(port, CA file) of a loopback HTTPS server in its own process (its threads and sockets
    are not counted as ours)."""
    tmp = tmp_path_factory.mktemp("tls")
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(cert), str(key)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        yield int(server.stdout.readline()), cert
    finally:
        server.kill()
        server.wait()


def sockets() -> int:
    fd_dir = Path("/proc/self/fd")
    count = 0
    for fd in os.listdir(fd_dir):
        try:
            count += os.readlink(fd_dir / fd).startswith("socket:")
        except OSError:
            continue  # closed meanwhile (the listing's own descriptor)
    return count


def api_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("api_"))


def test_a_quiet_operator_lets_go_of_the_threads_and_connections_a_burst_grew(
    tls_server: tuple[int, Path],
) -> None:
    port, ca = tls_server
    config = k8s.Configuration()
    config.host = f"https://127.0.0.1:{port}"
    config.ssl_ca_cert = str(ca)
    config.connection_pool_maxsize = 40
    op = Operator(OperatorConfig(leader_election=False, workers=4), KubeClient(k8s.ApiClient(config)))
    burst = 12

    async def scenario() -> None:
        asyncio.get_running_loop().set_default_executor(op._executor)  # as Operator.start does
        # Sockets are counted process-wide: one an earlier test left to the garbage collector
        # must not close between the counts below.
        gc.collect()
        idle_sockets = sockets()
        await asyncio.gather(*(asyncio.to_thread(op.api.request, "GET", "/version") for _ in range(burst)))
        assert api_threads() == burst, "a thread per concurrent request"
        assert sockets() - idle_sockets == burst, "a pooled connection per concurrent request"

        await op.release_idle()
        assert api_threads() <= 1, "only the new executor's thread that waited for the old one"
        assert sockets() == idle_sockets, "no pooled connection left open"

        # The operator works as before: a new thread, a new connection.
        assert await asyncio.to_thread(op.api.request, "GET", "/version") == {}
        assert sockets() - idle_sockets == 1

    asyncio.run(scenario())


def test_asyncio_tls_connections_read_into_a_small_buffer_and_still_read_everything(
    tls_server: tuple[int, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    port, ca = tls_server
    monkeypatch.setattr(sslproto.SSLProtocol, "max_size", sslproto.SSLProtocol.max_size)  # undone after
    memory.shrink_tls_read_buffers()
    import ssl

    async def fetch(size: int) -> tuple[int, int]:
        context = ssl.create_default_context(cafile=str(ca))
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
        protocol = writer.transport._ssl_protocol  # type: ignore[attr-defined]  # the SSLProtocol
        writer.write(f"GET /bytes/{size} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        headers = await reader.readuntil(b"\r\n\r\n")
        length = int(
            next(h for h in headers.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[1]
        )
        body = await reader.readexactly(length)
        buffer = len(protocol._ssl_buffer)
        writer.close()
        return buffer, len(body)

    buffer, received = asyncio.run(fetch(3 * 2**20))
    assert buffer <= memory.TLS_READ_BUFFER_BYTES, (
        f"read buffer {buffer} bytes (asyncio's default is 256 KiB)"
    )
    assert received == 3 * 2**20, "a body 48 times the buffer arrives whole"
