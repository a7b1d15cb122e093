"""A real Prometheus (Debian's, unpacked by hack/prometheus.sh) scraping static loopback targets.

No Kubernetes service discovery: every target is ``127.0.0.1:<port>`` with static labels (for
example ``namespace``), so nothing ever dials a pod or Service IP. ``stop()`` and ``start()``
keep the port and the data directory, so a test can take Prometheus away and bring it back.
"""

from __future__ import annotations

import subprocess
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.harness.cluster import free_port, repo_root


def prometheus_binary() -> str:
    done = subprocess.run(
        ["bash", str(repo_root() / "hack" / "prometheus.sh")], capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        raise RuntimeError(f"hack/prometheus.sh failed: {done.stderr.strip()[-500:]}")
    return done.stdout.strip().splitlines()[-1]


class PrometheusServer:
    def __init__(
        self,
        workdir: Path,
        targets: Sequence[tuple[int, Mapping[str, str]]],
        scrape_interval: str = "1s",
    ) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.binary = prometheus_binary()
        self.proc: subprocess.Popen[bytes] | None = None
        lines = [
            f"global: {{scrape_interval: {scrape_interval}, evaluation_interval: {scrape_interval}}}",
            "scrape_configs:",
            "  - job_name: vllm",
            "    static_configs:",
        ]
        for port, labels in targets:
            label_text = ", ".join(f"{k}: {v!r}" for k, v in sorted(labels.items()))
            lines += [f"      - targets: ['127.0.0.1:{port}']", f"        labels: {{{label_text}}}"]
        self.config = workdir / "prometheus.yml"
        self.config.write_text("\n".join(lines) + "\n")

    def start(self, timeout: float = 60) -> None:
        log = (self.workdir / "prometheus.log").open("ab")
        self.proc = subprocess.Popen(
            [
                self.binary,
                f"--config.file={self.config}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = (self.workdir / "prometheus.log").read_text(errors="replace")[-2000:]
                self.stop()
                raise RuntimeError(f"Prometheus did not become ready:\n{tail}")
            time.sleep(0.25)

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=1) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.proc = None


def promtool_binary() -> str:
    """promtool, shipped next to prometheus in Debian's package (and in upstream's tarballs)."""
    promtool = Path(prometheus_binary()).with_name("promtool")
    if not promtool.exists():
        raise RuntimeError(f"no promtool next to {promtool.parent / 'prometheus'}")
    return str(promtool)
