"""The prometheus-operator's PodMonitor CRD, from its pinned Go module (hack/prometheus-operator-crds.sh)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.harness.cluster import repo_root

POD_MONITOR_CRD_NAME = "podmonitors.monitoring.coreos.com"


def pod_monitor_crd_file() -> Path:
    """Path of monitoring.coreos.com_podmonitors.yaml in the cache (fetched on first use, ~3 s)."""
    script = repo_root() / "hack" / "prometheus-operator-crds.sh"
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{script} failed: {out.stderr.strip()[-2000:]}")
    return Path(out.stdout.strip().splitlines()[-1])
