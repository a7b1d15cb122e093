"""Cold start of a GLMDeployment's replicas, measured from its pods (pure).

A replica's cold start is the time from its pod's creation to its Ready condition: scheduling,
the node a node autoscaler launches for it (minutes on a cloud), image pull, model download and
load, CUDA graph capture. ``measured_cold_start(pods)`` is the median over the pods that became
Ready, so one slow or fast pod does not swing it; 0 when none has. The autoscaler uses it to size
its scale-down window (``scaling.autoscale``).
"""

from __future__ import annotations

import datetime as dt
import statistics
from collections.abc import Iterable, Mapping
from typing import Any


def _time(value: Any) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00")) if value else None
    except ValueError:
        return None


def pod_cold_start(pod: Mapping[str, Any]) -> float | None:
    """Seconds from creation to Ready, or None when the pod is not Ready."""
    created = _time((pod.get("metadata") or {}).get("creationTimestamp"))
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") == "True":
            ready = _time(cond.get("lastTransitionTime"))
            if created is not None and ready is not None and ready >= created:
                return (ready - created).total_seconds()
    return None


def median_cold_start(pods: Iterable[Mapping[str, Any]]) -> float | None:
    """Median cold start of the pods that became Ready; None when none has. Timestamps have whole
    seconds, so a replica Ready within its first second measures 0: measured, not missing."""
    samples = [s for s in (pod_cold_start(p) for p in pods) if s is not None]
    return float(statistics.median(samples)) if samples else None


def measured_cold_start(pods: Iterable[Mapping[str, Any]]) -> float:
    """Median cold start of the pods that became Ready (0 when none has)."""
    return median_cold_start(pods) or 0.0
