"""PodMonitors against the real prometheus-operator CRD (monitoring.coreos.com/v1, from the pinned Go
module; hack/prometheus-operator-crds.sh) on the local control plane.

One operator of its own (the chart's namespaced RBAC, one watched namespace, resync far above the
test durations: everything here is driven by watch events) serves one small GLMDeployment while
the CRD comes and goes. The steps run in file order and share that state:
without the CRD nothing is attempted; installing it makes the operator create the PodMonitor
(the apiserver checks it against the real schema); ``--pod-monitor=off`` prunes it; removing the
CRD under a running operator breaks nothing; ``--pod-monitor=on`` without the CRD says what to fix.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from glm_operator.render import names
from glm_operator.render.context import OwnerReference
from glm_operator.render.monitoring import relabelings, render_pod_monitor
from tests.harness.chart import template
from tests.harness.prometheus_operator import POD_MONITOR_CRD_NAME, pod_monitor_crd_file

from ..unit.test_render import make_ctx
from .conftest import E2ECluster, RunningOperator, delete_namespace
from .test_controller import apply, condition, glmd, phase_is, small, wait_for

pytestmark = pytest.mark.e2e

NAME = "pm"


@dataclasses.dataclass
class Setup:
    cluster: E2ECluster
    op: RunningOperator
    ns: str
    operator_ns: str
    release: str

    def rendered(self, mode: str) -> str:
        return template(
            self.cluster, self.release, self.operator_ns,
            "replicaCount=0", "crds.install=false", f"watchNamespaces={{{self.ns}}}",
            f"fullnameOverride={self.release}", f"prometheus.podMonitor={mode}",
        )  # fmt: skip

    def restart(self, mode: str) -> None:
        """Restart the operator with ``--pod-monitor=mode`` under the chart's RBAC for that mode."""
        self.op.stop()
        self.op.install(self.rendered(mode), service_account=self.release, namespace=self.operator_ns)
        self.op.start("--pod-monitor", mode)

    def pod_monitor(self) -> dict[str, Any] | None:
        out = self.cluster.kubectl(
            "get", f"{POD_MONITOR_CRD_NAME}", NAME, "-n", self.ns, "-o", "json", "--ignore-not-found"
        ).stdout.strip()
        return json.loads(out) if out else None

    def pod_monitor_crd_absent(self) -> bool:
        out = self.cluster.kubectl("get", "crd", POD_MONITOR_CRD_NAME, "--ignore-not-found", "-o", "name")
        return not out.stdout.strip()

    def pod_monitor_log_lines(self) -> list[str]:
        """Log lines about PodMonitors, less kopf's start-up notice that it watches no resource
        whose CRD is missing (as for Karpenter's NodePools)."""
        return [
            line
            for line in self.op.log_tail(500_000).splitlines()
            if "podmonitor" in line.lower() and "Unresolved resources cannot be served" not in line
        ]


def _crd_absent(cluster: E2ECluster) -> None:
    cluster.kubectl("delete", "crd", POD_MONITOR_CRD_NAME, "--ignore-not-found", "--timeout=60s")


@pytest.fixture(scope="module")
def setup(
    cluster: E2ECluster, operator: RunningOperator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Setup]:
    """``operator`` (the session's) installs the GLMDeployment CRD; this module runs its own."""
    _crd_absent(cluster)  # a run that died earlier may have left it
    s = Setup(
        cluster=cluster,
        op=RunningOperator(cluster.local, tmp_path_factory.mktemp("pod-monitor-operator"), namespaces=""),
        ns=cluster.namespace("pm"),
        operator_ns=cluster.namespace("pmop"),
        release=f"glmpm-{os.getpid()}",
    )
    s.op.namespaces = s.ns
    s.op.install(s.rendered("auto"), service_account=s.release, namespace=s.operator_ns)
    try:
        s.op.start()
        apply(cluster, s.ns, small(NAME))
        yield s
    finally:
        s.op.stop()
        _crd_absent(cluster)
        cluster.kubectl(
            "delete", "--ignore-not-found", "--wait=false", "-f", "-", input=s.rendered("auto"), check=False
        )
        for ns in (s.ns, s.operator_ns):
            delete_namespace(cluster, ns)  # its pod holds an L4 other tests count on


def test_without_the_crd_no_pod_monitor_is_attempted_and_nothing_errors(setup: Setup) -> None:
    wait_for(phase_is(setup.cluster, setup.ns, NAME, "Ready"), 120, "Ready without the PodMonitor API")
    lines = setup.pod_monitor_log_lines()
    assert (
        len(lines) == 1
        and "PodMonitor API monitoring.coreos.com/v1 not served (--pod-monitor=auto)" in lines[0]
    ), lines
    assert "Traceback" not in setup.op.log_tail(500_000)
    assert condition(glmd(setup.cluster, setup.ns, NAME), "Degraded").get("reason") != "ChildRejected"


def test_installing_the_crd_makes_the_operator_create_a_pod_monitor_the_apiserver_accepts(
    setup: Setup,
) -> None:
    cluster = setup.cluster
    cluster.kubectl("apply", "--server-side", "-f", str(pod_monitor_crd_file()))
    cluster.local.wait_crds_established(POD_MONITOR_CRD_NAME)
    # No restart and a 600 s resync: only the CRD's watch event can have told the operator.
    pm = wait_for(setup.pod_monitor, 60, "the PodMonitor after the CRD was installed")
    owner = glmd(cluster, setup.ns, NAME)
    (ref,) = pm["metadata"]["ownerReferences"]
    assert ref["uid"] == owner["metadata"]["uid"] and ref["kind"] == "GLMDeployment" and ref["controller"]
    # Stored as rendered: a field the CRD's schema did not know would have been dropped silently.
    assert pm["spec"]["selector"] == {"matchLabels": names.service_selector(NAME)}
    (endpoint,) = pm["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "http" and endpoint["path"] == "/metrics"
    assert endpoint["relabelings"] == relabelings()
    assert any(
        "PodMonitor API monitoring.coreos.com/v1 found" in line for line in setup.pod_monitor_log_lines()
    )

    # The renderer's object under strict server-side field validation: unknown or mistyped
    # fields are errors, not pruned. A misspelt field shows the check can fail.
    ctx = make_ctx(
        namespace=setup.ns,
        deployment_name="dry-run",
        owner=OwnerReference(name=NAME, uid=owner["metadata"]["uid"]),
    )
    rendered = render_pod_monitor(ctx, interval_seconds=15)

    def dry_run(obj: dict[str, Any]) -> Any:
        return cluster.kubectl(
            "apply", "--server-side", "--dry-run=server", "--validate=strict", "--field-manager=glm-e2e",
            "-f", "-", input=json.dumps(obj), check=False,
        )  # fmt: skip

    accepted = dry_run(rendered)
    assert accepted.returncode == 0, accepted.stderr
    misspelt = json.loads(json.dumps(rendered))
    misspelt["spec"]["podMetricsEndpoints"][0]["relabellings"] = misspelt["spec"]["podMetricsEndpoints"][
        0
    ].pop("relabelings")
    refused = dry_run(misspelt)
    assert refused.returncode != 0 and "relabellings" in refused.stderr, refused.stderr


def test_off_prunes_the_pod_monitor(setup: Setup) -> None:
    assert setup.pod_monitor() is not None
    setup.restart("off")
    wait_for(lambda: setup.pod_monitor() is None, 60, "the PodMonitor pruned with --pod-monitor=off")
    wait_for(phase_is(setup.cluster, setup.ns, NAME, "Ready"), 60, "still Ready")
    log = setup.op.log_tail(500_000)
    assert "Forbidden" not in log and "Traceback" not in log, log[-3000:]


def test_removing_the_crd_under_a_running_operator_breaks_nothing(setup: Setup) -> None:
    setup.restart("auto")
    wait_for(setup.pod_monitor, 60, "the PodMonitor again with --pod-monitor=auto")
    setup.cluster.kubectl("delete", "crd", POD_MONITOR_CRD_NAME, "--timeout=60s")
    wait_for(
        lambda: any(
            "PodMonitor API monitoring.coreos.com/v1 gone" in line for line in setup.pod_monitor_log_lines()
        ),
        60,
        "the operator notices the CRD is gone",
    )
    # A spec change after that reconciles without trying the PodMonitor.
    apply(setup.cluster, setup.ns, small(NAME, contextLength=4096))
    wait_for(phase_is(setup.cluster, setup.ns, NAME, "Ready"), 90, "Ready after the change")
    assert condition(glmd(setup.cluster, setup.ns, NAME), "Degraded").get("reason") != "ChildRejected"
    assert "Traceback" not in setup.op.log_tail(500_000)
    # Not even for a moment: the PodMonitor's deletion with its CRD wakes a reconcile while the
    # CRD is terminating, which must not count as a rejected child.
    events = json.loads(setup.cluster.kubectl("get", "events", "-n", setup.ns, "-o", "json").stdout)["items"]
    assert not [e["message"] for e in events if e.get("reason") == "ChildRejected"]


def test_on_without_the_crd_reports_the_fix(setup: Setup) -> None:
    """--pod-monitor=on forces the PodMonitor: where the API is missing, the GLMDeployment says so
    (Degraded/ChildRejected naming the CRD and the flag) while its workload keeps running."""
    assert setup.pod_monitor_crd_absent()
    setup.restart("on")

    def rejected() -> dict[str, Any] | None:
        degraded = condition(glmd(setup.cluster, setup.ns, NAME), "Degraded")
        return degraded if degraded.get("reason") == "ChildRejected" else None

    degraded = wait_for(rejected, 60, "Degraded/ChildRejected with --pod-monitor=on and no CRD")
    assert "PodMonitor" in degraded["message"] and "--pod-monitor=auto or off" in degraded["message"], (
        degraded
    )
    deployments = json.loads(
        setup.cluster.kubectl("get", "deployments", "-n", setup.ns, "-o", "json").stdout
    )["items"]
    assert len(deployments) == 1  # the workload is untouched
