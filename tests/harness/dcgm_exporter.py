"""A stand-in for NVIDIA's DCGM exporter on loopback: the four GPU series the dashboards and alerts read.

``DCGM_FI_DEV_GPU_UTIL`` (%), ``DCGM_FI_DEV_FB_USED`` (MiB), ``DCGM_FI_DEV_POWER_USAGE`` (W) and
``DCGM_FI_DEV_GPU_TEMP`` (°C), each per GPU with the exporter's labels (``gpu``, ``UUID``,
``device``, ``modelName``, ``Hostname``) and, as its Kubernetes pod attribution writes them, the
``namespace``, ``pod`` and ``container`` using the GPU. Values are whatever the test sets.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FIELDS = (
    ("DCGM_FI_DEV_GPU_UTIL", "utilisation", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_FB_USED", "memory_used_mib", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_POWER_USAGE", "power_watts", "Power draw (in W)."),
    ("DCGM_FI_DEV_GPU_TEMP", "temperature_celsius", "GPU temperature (in C)."),
)


@dataclass
class GPU:
    hostname: str
    index: int
    model_name: str = "NVIDIA H100 80GB HBM3"
    namespace: str = ""
    pod: str = ""
    container: str = "vllm"
    utilisation: float = 0.0
    memory_used_mib: float = 0.0
    power_watts: float = 0.0
    temperature_celsius: float = 0.0

    def labels(self) -> str:
        pairs = {
            "gpu": str(self.index),
            "UUID": f"GPU-{self.hostname}-{self.index}",
            "device": f"nvidia{self.index}",
            "modelName": self.model_name,
            "Hostname": self.hostname,
        }
        if self.pod:
            pairs |= {"namespace": self.namespace, "pod": self.pod, "container": self.container}
        return ",".join(f'{k}="{v}"' for k, v in pairs.items())


def render(gpus: list[GPU]) -> str:
    lines = []
    for metric, attribute, help_text in FIELDS:
        lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} gauge"]
        lines += [f"{metric}{{{gpu.labels()}}} {float(getattr(gpu, attribute))!r}" for gpu in gpus]
    return "\n".join(lines) + "\n"


class DCGMExporterStandIn:
    """Serves ``render(gpus)`` at /metrics on 127.0.0.1 (a free port)."""

    def __init__(self, gpus: list[GPU]) -> None:
        self.gpus = gpus
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = render(stand_in.gpus).encode() if self.path == "/metrics" else b"not found\n"
                self.send_response(200 if self.path == "/metrics" else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def __enter__(self) -> DCGMExporterStandIn:
        self._thread = threading.Thread(target=self._server.serve_forever, name="dcgm-stand-in", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
