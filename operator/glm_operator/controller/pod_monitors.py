"""Whether the operator renders a PodMonitor per GLMDeployment (``--pod-monitor``).

- ``auto`` (default): when the apiserver serves ``podmonitors`` in monitoring.coreos.com/v1 (the
  prometheus-operator's CRD). Found by API discovery at start-up, again on every event of that CRD
  (installed, established, removed) and once per resync period, so installing the
  prometheus-operator after the operator needs no restart.
- ``on``: always; an apiserver without the API rejects it (Degraded/ChildRejected says so).
- ``off``: never; PodMonitors an earlier setting created are pruned.
"""

from __future__ import annotations

from enum import StrEnum


class PodMonitorMode(StrEnum):
    AUTO = "auto"
    ON = "on"
    OFF = "off"


def pod_monitor_wanted(mode: PodMonitorMode, served: bool) -> bool:
    """Render the PodMonitor? ``served``: the PodMonitor API was found by discovery."""
    return mode is PodMonitorMode.ON or (mode is PodMonitorMode.AUTO and served)
