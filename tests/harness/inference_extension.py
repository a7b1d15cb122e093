"""The Gateway API Inference Extension on the local cluster: its InferencePool CRD, and its real
endpoint picker (EPP) run on loopback, asked through Envoy's ext_proc API by ``extproc-pick``.

``hack/build-tools.sh`` builds both binaries from ``tools/inference-extension`` (the pinned module,
v1.5.0; the picker patched to listen on 127.0.0.1 only) and copies the module's InferencePool CRD
beside the binaries (``inference-extension-crds/``). The picker runs with the command line the
operator renders for its Deployment (read back from the apiserver), its ports moved to free ones,
and as the picker's ServiceAccount: the Role the operator made is what lets it read the pool and
its pods. It dials each pod's ``status.podIP`` on the pool's port for vLLM's metrics, so the
tests give the pods loopback addresses (a KWOK node whose podCIDR is in 127.0.0.0/8) and run a vLLM
emulator on each: ``EndpointPicker.start`` refuses a pool with a pod outside 127.0.0.0/8.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.harness.cluster import LocalCluster, free_port, stop_process_group

CRD_NAME = "inferencepools.inference.networking.k8s.io"
CRD_FILE = "inference.networking.k8s.io_inferencepools.yaml"


def crd_file(cluster: LocalCluster) -> Path:
    return cluster.bin_dir.parent / "inference-extension-crds" / CRD_FILE


def install_crd(cluster: LocalCluster) -> None:
    """The InferencePool CRD of the pinned module, Established (idempotent)."""
    path = crd_file(cluster)
    if not path.exists():
        raise RuntimeError(f"{path} is missing: run hack/build-tools.sh (make tools)")
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
    cluster.wait_crds_established(CRD_NAME)


def loopback_only(addresses: Sequence[str]) -> None:
    """Refuse to go on unless every address is in 127.0.0.0/8 (nothing here may dial a pod IP)."""
    outside = [a for a in addresses if not ipaddress.ip_address(a).is_loopback]
    if outside:
        raise AssertionError(f"pod addresses outside 127.0.0.0/8: {outside}")


def listening_addresses(pid: int) -> set[str]:
    """The local addresses (``ip:port``) of the TCP sockets process ``pid`` listens on, from /proc."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = os.readlink(fd) if fd.is_symlink() else ""
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                continue
            address, port = fields[1].split(":")
            raw = bytes.fromhex(address)
            # /proc writes each 32-bit word of the address in host (little-endian) order
            words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            found.add(f"{ipaddress.ip_address(words)}:{int(port, 16)}")
    return found


def _accepts(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


class EndpointPicker:
    """The real picker for one InferencePool, on 127.0.0.1, as the operator deploys it."""

    def __init__(self, cluster: LocalCluster, namespace: str, deployment: str, workdir: Path) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.deployment = deployment  # the picker's Deployment (and ServiceAccount) name
        self.workdir = workdir
        self.grpc_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = workdir / f"{deployment}.log"

    def rendered_args(self) -> list[str]:
        out = self.cluster.kubectl("get", "deployment", self.deployment, "-n", self.namespace, "-o", "json")
        container = json.loads(out.stdout)["spec"]["template"]["spec"]["containers"][0]
        return list(container["args"])

    def start(self, timeout: float = 60) -> EndpointPicker:
        args = self.rendered_args()
        ports = {
            "--grpc-port": self.grpc_port,
            "--grpc-health-port": free_port(),
            "--metrics-port": free_port(),
        }
        for flag, port in ports.items():
            args[args.index(flag) + 1] = str(port)
        kubeconfig = self.cluster.service_account_kubeconfig(
            self.deployment, self.namespace, self.workdir / f"{self.deployment}.kubeconfig"
        )
        env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "NAMESPACE": self.namespace,
            "POD_NAME": f"{self.deployment}-0-local",
        }
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [str(self.cluster.bin_dir / "epp"), *args],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while not _accepts(self.grpc_port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the endpoint picker did not start:\n{self.log_text()[-4000:]}")
            time.sleep(0.2)
        return self

    def log_text(self) -> str:
        return self.log.read_bytes().decode(errors="replace")

    def pick(self, requests: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Ask the picker for each request, in order (``{"path": ..., "body": {...}}`` each); its
        answers: ``{"endpoint": "ip:port"}`` or ``{"status": code, ...}``."""
        lines = "".join(json.dumps(r) + "\n" for r in requests)
        out = subprocess.run(
            [str(self.cluster.bin_dir / "extproc-pick"), "-tls", "-addr", f"127.0.0.1:{self.grpc_port}"],
            input=lines.encode(),
            capture_output=True,
            timeout=120,
            check=True,
        )
        return [json.loads(line) for line in out.stdout.decode().splitlines()]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            stop_process_group(self.proc.pid)
        self.proc = None
