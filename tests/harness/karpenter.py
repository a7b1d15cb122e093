"""Karpenter's KWOK provider as the node autoscaler of a local cluster (optional component).

``KarpenterProvider(cluster).start()`` applies Karpenter's CRDs (NodePool, NodeClaim,
KWOKNodeClass, from the pinned module, copied next to the binary by ``hack/build-tools.sh``) and
the committed NodePools, then runs ``karpenter-kwok`` as a process against the cluster's
apiserver: Karpenter's real provisioning, scheduling simulation, limits and consolidation, with a
cloud provider that creates Node objects from ``tests/fixtures/karpenter/instance-types.json``.
The nodes it creates carry the ``kwok.x-k8s.io/node: fake`` annotation, so the cluster's own KWOK
process plays their kubelet and pods on them become Ready.

Safety: its metrics and health ports are bound to 127.0.0.1 (the build patches the bind
address, see hack/build-tools.sh), on free ports; it has no webhook. Leader election is off.
The process is registered with the cluster, so ``LocalCluster.down()`` stops it too.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from pathlib import Path

from tests.harness.cluster import ClusterError, LocalCluster, free_port, repo_root, stop_process_group

FIXTURES = repo_root() / "tests" / "fixtures" / "karpenter"
BINARY = "karpenter-kwok"
CRDS = ("nodepools.karpenter.sh", "nodeclaims.karpenter.sh", "kwoknodeclasses.karpenter.kwok.sh")


class KarpenterProvider:
    def __init__(
        self,
        cluster: LocalCluster,
        instance_types: Path = FIXTURES / "instance-types.json",
        nodepools: Path = FIXTURES / "nodepools.yaml",
    ) -> None:
        self.cluster = cluster
        self.instance_types = instance_types
        self.nodepools = nodepools
        self.log_path = cluster.state_dir / "logs" / "karpenter.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.health_port = 0

    @property
    def crd_dir(self) -> Path:
        return self.cluster.bin_dir.parent / "karpenter-crds"

    def install(self) -> None:
        """Karpenter's CRDs, then the NodePools and their KWOKNodeClass."""
        if not (self.cluster.bin_dir / BINARY).exists() or not self.crd_dir.is_dir():
            raise ClusterError(
                f"{BINARY} or its CRDs missing in {self.cluster.bin_dir}; run hack/build-tools.sh"
            )
        for crd in sorted(self.crd_dir.glob("*.yaml")):
            self.cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
        self.cluster.wait_crds_established(*CRDS)
        self.cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(self.nodepools))

    def start(self, timeout: float = 90.0) -> None:
        self.install()
        self.health_port = free_port()
        env = {
            **os.environ,
            "KUBECONFIG": str(self.cluster.kubeconfig),
            "INSTANCE_TYPES_FILE_PATH": str(self.instance_types),
            "DISABLE_LEADER_ELECTION": "true",
            "METRICS_PORT": str(free_port()),
            "HEALTH_PROBE_PORT": str(self.health_port),
            # a short batching window: a test's pods arrive together
            "BATCH_MAX_DURATION": "3s",
            "BATCH_IDLE_DURATION": "1s",
            "LOG_LEVEL": "info",
            "DISABLE_CLUSTER_STATE_OBSERVABILITY": "true",
        }
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(
            [str(self.cluster.bin_dir / BINARY)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        log.close()
        self.cluster.register_extra_process("karpenter", self.proc.pid)
        deadline = time.monotonic() + timeout
        while not self._ready():
            if self.proc.poll() is not None:
                raise ClusterError(f"{BINARY} exited ({self.proc.returncode}):\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise ClusterError(f"{BINARY} not ready after {timeout:.0f}s:\n{self.log_tail()}")
            time.sleep(0.5)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None:
            stop_process_group(self.proc.pid)
            self.proc.wait()
            self.proc = None

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""
