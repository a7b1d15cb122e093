"""The prometheus-operator's CRDs (PodMonitor, ServiceMonitor, PrometheusRule) from its pinned Go module
(hack/prometheus-operator-crds.sh)."""

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


def monitoring_crd_files() -> dict[str, Path]:
    """CRD name -> file of the PodMonitor, ServiceMonitor and PrometheusRule CRDs (same version)."""
    directory = pod_monitor_crd_file().parent
    return {
        f"{plural}.monitoring.coreos.com": directory / f"monitoring.coreos.com_{plural}.yaml"
        for plural in ("podmonitors", "servicemonitors", "prometheusrules")
    }
