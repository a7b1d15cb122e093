"""A tiny stand-in for vLLM's /metrics endpoint, for tests (stdlib only, loopback only).

Serves ``GET /metrics`` in the Prometheus text format with the two gauges the autoscaler reads,
``vllm:num_requests_waiting`` and ``vllm:num_requests_running`` (labels ``model_name`` and
``engine``, as vLLM v1 writes them), and ``POST /admin/set`` with a JSON body
``{"model": "glm-4.5-air", "waiting": 12, "running": 16}`` to change them (either value may be
left out; an unknown model is added). ``GET /health`` answers 200.

In-process::

    with VLLMMetricsEmulator({"glm-4.5-air": (0, 0)}) as emulator:
        emulator.set("glm-4.5-air", waiting=12)
        ...  # scrape emulator.url + "/metrics"

As a process (prints the port on stdout, exits after --max-seconds)::

    python -m glm_operator.testing.vllm_emulator --model glm-4.5-air --max-seconds 600
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["VLLMMetricsEmulator", "main", "render_metrics"]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_metrics(gauges: Mapping[str, tuple[float, float]]) -> str:
    """Prometheus text exposition of ``{model: (waiting, running)}``."""
    lines = []
    for metric, index, help_text in (
        ("vllm:num_requests_running", 1, "Number of requests in model execution batches."),
        ("vllm:num_requests_waiting", 0, "Number of requests waiting to be processed."),
    ):
        lines.append(f"# HELP {metric} {help_text}")
        lines.append(f"# TYPE {metric} gauge")
        for model, values in sorted(gauges.items()):
            lines.append(f'{metric}{{engine="0",model_name="{_escape(model)}"}} {float(values[index])!r}')
    return "\n".join(lines) + "\n"


class VLLMMetricsEmulator:
    """Serves fake vLLM queue gauges on 127.0.0.1 (a free port unless ``port`` is given)."""

    def __init__(self, models: Mapping[str, tuple[float, float]] | None = None, port: int = 0) -> None:
        self._lock = threading.Lock()
        self._gauges: dict[str, tuple[float, float]] = dict(models or {})
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def set(self, model: str, *, waiting: float | None = None, running: float | None = None) -> None:
        with self._lock:
            old_waiting, old_running = self._gauges.get(model, (0.0, 0.0))
            self._gauges[model] = (
                old_waiting if waiting is None else float(waiting),
                old_running if running is None else float(running),
            )

    def snapshot(self) -> dict[str, tuple[float, float]]:
        with self._lock:
            return dict(self._gauges)

    def start(self) -> VLLMMetricsEmulator:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="vllm-emulator",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> VLLMMetricsEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        emulator = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] == "/metrics":
                    self._reply(200, render_metrics(emulator.snapshot()), "text/plain; version=0.0.4")
                elif self.path == "/health":
                    self._reply(200, "", "text/plain")
                else:
                    self._reply(404, "not found\n", "text/plain")

            def do_POST(self) -> None:
                if self.path != "/admin/set":
                    self._reply(404, "not found\n", "text/plain")
                    return
                try:
                    length = int(self.headers.get("Content-Length", "0"))
                    body: Any = json.loads(self.rfile.read(length) or b"{}")
                    model = str(body["model"])
                    waiting = body.get("waiting")
                    running = body.get("running")
                    emulator.set(
                        model,
                        waiting=None if waiting is None else float(waiting),
                        running=None if running is None else float(running),
                    )
                except (KeyError, TypeError, ValueError, AttributeError) as err:
                    self._reply(400, f"bad request: {err}\n", "text/plain")
                    return
                self._reply(200, json.dumps({"ok": True}) + "\n", "application/json")

            def _reply(self, status: int, body: str, content_type: str) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--model", action="append", default=[], help="served model name (repeatable)")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0 = any free port)")
    parser.add_argument("--max-seconds", type=float, default=3600.0, help="exit after this long")
    args = parser.parse_args(argv)
    emulator = VLLMMetricsEmulator({model: (0.0, 0.0) for model in args.model}, port=args.port)
    with emulator:
        print(emulator.port, flush=True)
        deadline = time.monotonic() + args.max_seconds
        try:
            while time.monotonic() < deadline:
                time.sleep(min(1.0, max(deadline - time.monotonic(), 0.0)))
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
