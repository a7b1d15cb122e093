"""The real kube-apiserver answers the operator with 429 (API Priority and Fairness) during a burst.

``tests.harness.apf`` routes the operator's writes in the test namespace into a priority
level with no concurrency of its own, whose only seat a test ServiceAccount keeps busy: the
apiserver refuses them with ``429`` and ``Retry-After: 1``. Reads, watches and the Lease are not
matched. While a burst of GLMDeployments is applied, the operator must log one line per failure
(no traceback), wait at least ``Retry-After`` between two tries of a key (no request storm: the
apiserver's own counter of refused requests stays within what that allows), and once the
FlowSchemas are removed every GLMDeployment converges, with no duplicate and no orphan.
"""

from __future__ import annotations

import datetime as dt
import itertools
import re
import time
from collections import defaultdict

import pytest

from tests.harness.apf import ApfThrottle
from tests.harness.operator import OPERATOR_NAMESPACE, OPERATOR_SA

from .conftest import E2ECluster, RunningOperator
from .test_controller import apply, get, small, wait_for
from .test_controller_faults import converged, log_size, operator_log_since

pytestmark = pytest.mark.e2e
BURST = 6
THROTTLED_SECONDS = 20.0
RETRY_AFTER = 1.0  # the least API Priority and Fairness asks for
OBJECTS_PER_RECONCILE = 3  # Deployment, Service, PodDisruptionBudget, applied together
FAILURE = re.compile(
    r"^(?P<time>\S+ \S+) WARNING \S+: reconcile (?P<key>\S+) failed: HTTP 429 .*; "
    r"retry in (?P<delay>[\d.]+) s \(Retry-After (?P<asked>[\d.]+) s\)$"
)


def _failures(log: str, ns: str) -> dict[str, list[tuple[float, float, float]]]:
    """Per GLMDeployment: (time, announced delay, Retry-After) of each 429 the operator logged."""
    out: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    for line in log.splitlines():
        match = FAILURE.match(line)
        if match and match["key"].startswith(f"{ns}/"):
            at = dt.datetime.strptime(match["time"], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            out[match["key"]].append((at, float(match["delay"]), float(match["asked"])))
    return out


def test_the_operator_backs_off_on_429_from_priority_and_fairness_and_converges_after(
    cluster: E2ECluster, operator: RunningOperator, ns: str
) -> None:
    offset = log_size(operator)
    throttle = ApfThrottle(
        cluster.local,
        f"glm-e2e-{ns}"[:50],
        ns,
        victim=(OPERATOR_NAMESPACE, OPERATOR_SA),
        resources=[
            ("apps", "deployments"),
            ("", "services"),
            ("policy", "poddisruptionbudgets"),
            ("inference.glm.dev", "glmdeployments/status"),
        ],
    )
    names = [f"burst-{i}" for i in range(BURST)]
    try:
        throttle.start()
        assert throttle.active(), "the priority level never came into force"
        rejected_before = throttle.rejected()
        started = time.monotonic()
        for name in names:
            apply(cluster, ns, small(name))
        time.sleep(max(0.0, THROTTLED_SECONDS - (time.monotonic() - started)))
        rejected = throttle.rejected() - rejected_before
        dispatched = throttle.dispatched()
        throttled_for = time.monotonic() - started
    finally:
        throttle.stop()
    removed = time.monotonic()
    for name in names:
        wait_for(converged(cluster, ns, name), 90, f"{name} converged after the FlowSchemas were removed")
    converged_after = time.monotonic() - removed

    log = operator_log_since(operator, offset)
    failures = _failures(log, ns)
    lines = sum(len(v) for v in failures.values())
    gaps = [b[0] - a[0] for v in failures.values() for a, b in itertools.pairwise(v)]
    asked = sorted({a for v in failures.values() for _, _, a in v})
    print(
        f"\n{rejected} writes refused with 429 in {throttled_for:.0f} s ({dispatched} let through, "
        f"{throttle.holder_requests} seat-holder requests); {lines} failure lines for {len(failures)} "
        f"GLMDeployments, Retry-After asked {asked} s, shortest gap between two tries of one key "
        f"{min(gaps, default=0):.2f} s; "
        f"all {BURST} converged {converged_after:.1f} s after the FlowSchemas were removed"
    )
    assert rejected > 0, "the apiserver never refused the operator: the test tested nothing"
    assert lines > 0, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    # Retry-After honoured: every announced delay is at least what the apiserver asked for (APF
    # asks for more while it keeps refusing), and the next try of that key waited that long.
    assert all(delay >= asked for v in failures.values() for _, delay, asked in v), failures
    waits = [(b[0] - a[0], a[1]) for v in failures.values() for a, b in itertools.pairwise(v)]
    assert all(waited >= delay - 0.1 for waited, delay in waits), waits
    # No storm: at most one try per key per Retry-After, each refused at most once per object.
    tries_allowed = BURST * (throttled_for / RETRY_AFTER + 1)
    assert lines <= tries_allowed
    assert rejected <= OBJECTS_PER_RECONCILE * tries_allowed
    # No duplicate, no orphan: one Deployment and one Service per GLMDeployment, owned by it.
    deployments = get(cluster, ns, "deployments")["items"]
    assert sorted(d["metadata"]["ownerReferences"][0]["name"] for d in deployments) == names
    assert sorted(s["metadata"]["name"] for s in get(cluster, ns, "services")["items"]) == names
