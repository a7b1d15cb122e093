"""The controller under faults: the apiserver going away, children it rejects, concurrent writers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from glm_operator.clients.kube import KubeClient
from glm_operator.controller.config import OperatorConfig
from glm_operator.controller.manager import Manager
from glm_operator.desired import Desired, compute_desired
from glm_operator.planning.diagnosis.conditions import MetricsStatus
from tests.harness.faults import ApiserverOutage

from .conftest import E2ECluster, RunningOperator, delete_namespace
from .test_controller import apply, children, condition, get, glmd, phase_is, small, vllm_args, wait_for

pytestmark = pytest.mark.e2e


def operator_log_since(operator: RunningOperator, offset: int) -> str:
    with open(operator.log_path, "rb") as fh:
        fh.seek(offset)
        return fh.read().decode(errors="replace")


def log_size(operator: RunningOperator) -> int:
    return operator.log_path.stat().st_size if operator.log_path.exists() else 0


def converged(cluster: E2ECluster, ns: str, name: str) -> Callable[[], bool]:
    """The operator's side is done: the current generation planned, its child Deployment there."""

    def check() -> bool:
        obj = glmd(cluster, ns, name)
        status = obj.get("status") or {}
        current = status.get("observedGeneration") == obj["metadata"]["generation"]
        return (
            current
            and condition(obj, "Planned").get("status") == "True"
            and bool(children(cluster, ns, name))
        )

    return check


def test_the_apiserver_going_away_mid_reconcile_converges_without_duplicates(
    cluster: E2ECluster, operator: RunningOperator, ns: str
) -> None:
    """Two outages: a short one (inside the Lease's renew deadline: the leader keeps leading and
    sees a spec change made right after the apiserver returns within seconds), and a long one
    (the leader loses its Lease and exits non-zero; restarted as the kubelet would, it takes its
    own Lease back, having the same pod name). Both converge (the operator's side: plan, status,
    children), with no duplicate or orphan object and no traceback."""
    offset = log_size(operator)
    apply(cluster, ns, small("before"))
    wait_for(phase_is(cluster, ns, "before", "Ready"), 60, "before Ready")
    figures = []
    with operator.restarted_on_exit() as exit_codes:
        for round_, (down, context) in enumerate([(2.0, 4096), (20.0, 2048)]):
            for i in range(2):
                apply(cluster, ns, small(f"burst-{round_}-{i}"))
            outage = ApiserverOutage(cluster.local)  # while the burst is being reconciled
            time.sleep(down)
            back = outage.restore()
            apply(cluster, ns, small("before", contextLength=context))

            def changed(context: int = context) -> bool:
                (dep,) = children(cluster, ns, "before")
                return str(context) in vllm_args(dep)

            wait_for(changed, 30, f"spec change applied after a {down:.0f} s outage")
            seen = time.monotonic() - back
            for name in ("before", f"burst-{round_}-0", f"burst-{round_}-1"):
                wait_for(converged(cluster, ns, name), 30, f"{name} converged after the outage")
            figures.append(
                f"{down:.0f} s outage: spec change live {seen:.1f} s, all converged "
                f"{time.monotonic() - back:.1f} s after the apiserver returned"
            )
    print("; ".join(figures) + f"; operator exits: {exit_codes}")
    # A leader cut off past its renew deadline exits 1 (at least in the long outage; the short one
    # also counts the apiserver's few seconds of start-up), never otherwise.
    assert exit_codes and set(exit_codes) == {1}, exit_codes
    names = ["before", "burst-0-0", "burst-0-1", "burst-1-0", "burst-1-1"]
    deployments = get(cluster, ns, "deployments")["items"]
    assert sorted(d["metadata"]["ownerReferences"][0]["name"] for d in deployments) == names
    assert sorted(s["metadata"]["name"] for s in get(cluster, ns, "services")["items"]) == names
    text = operator_log_since(operator, offset)
    assert "Traceback" not in text, text[-3000:]
    # Pods are not checked for Ready: during the long outage KWOK cannot renew the node Leases, the
    # node lifecycle controller may mark the nodes Unknown and their pods NotReady (seen in CI up to
    # ~70 s after the outage), and only once a node is Ready again does our KWOK stage
    # (tests/fixtures/kwok-stages/pod-ready-after-node-ready.yaml) make its pods Ready, as a kubelet
    # would. The nodes come back: wait for them, so the next test finds a healthy cluster.
    cluster.kubectl("wait", "--for=condition=Ready", "node", "--all", "--timeout=120s", timeout=130)
    delete_namespace(cluster, ns)


def refusing_policy(ns: str) -> list[dict[str, Any]]:
    """An in-apiserver admission policy (CEL; no webhook) that refuses the operator's Deployments
    in ``ns``, as a cluster's policy engine might: the GLMDeployment itself is valid."""
    name = f"refuse-{ns}"
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": ["apps"],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["deployments"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": "'cost-center' in object.spec.template.metadata.labels",
                        "message": "GPU workloads need a cost-center pod label",
                    }
                ],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}},
            },
        },
    ]


def test_a_child_the_apiserver_rejects_makes_the_glmdeployment_degraded_with_its_message(
    cluster: E2ECluster, operator: RunningOperator, ns: str
) -> None:
    policy = yaml.safe_dump_all(refusing_policy(ns))
    cluster.kubectl("apply", "-f", "-", input=policy)
    offset = log_size(operator)
    try:
        time.sleep(2)  # the apiserver loads the policy
        apply(cluster, ns, small("rejected"))

        def degraded() -> dict[str, Any] | None:
            obj = glmd(cluster, ns, "rejected")
            return obj if condition(obj, "Degraded").get("reason") == "ChildRejected" else None

        obj = wait_for(degraded, 60, "Degraded ChildRejected")
        message = condition(obj, "Degraded")["message"]
        assert "cost-center" in message and "rejected-l4" in message, message
        assert obj["status"]["phase"] == "Failed"
        assert not children(cluster, ns, "rejected")
        events = get(cluster, ns, "events")["items"]
        assert any(
            e["reason"] == "ChildRejected" and e["involvedObject"]["name"] == "rejected" for e in events
        )
        time.sleep(10)
        text = operator_log_since(operator, offset)
        failures = [line for line in text.splitlines() if "/rejected:" in line or "/rejected " in line]
        assert "Traceback" not in text, text[-3000:]
        # Exponential backoff (5 ms doubling): ~12 attempts in the first 20 s, not a fixed-rate loop.
        assert 1 <= len(failures) <= 16, "\n".join(failures)
    finally:
        cluster.kubectl("delete", "-f", "-", "--ignore-not-found", input=policy)
    time.sleep(2)
    # The policy is gone: a touch (no new generation) retries at once, the child is created.
    cluster.kubectl("annotate", "glmd", "rejected", "-n", ns, "touched=1")

    # The operator's side (pods going Ready depends on the scheduler, slow to recover right after
    # the apiserver restart of the test before).
    def created() -> bool:
        reason = condition(glmd(cluster, ns, "rejected"), "Degraded").get("reason")
        return bool(children(cluster, ns, "rejected")) and reason != "ChildRejected"

    wait_for(created, 60, "child created and ChildRejected cleared once the policy is gone")


class AutoscalerRunning:
    """Stands for the autoscaler loop of an operator run with Prometheus (not started here)."""

    def metrics_status(self, key: tuple[str, str]) -> MetricsStatus:
        return MetricsStatus(True, "QueueMetricsAvailable", "the queue metrics were read")

    def planned(self, key: tuple[str, str], targets: object) -> None:
        pass


async def reconcile_once(
    api: KubeClient, ns: str, name: str, between: Callable[[Desired], None] | None = None
) -> None:
    """One reconcile in this process (observe, compute, apply, status) against the real apiserver;
    ``between`` runs after the read and before the writes (a concurrent writer's window)."""
    manager = Manager(OperatorConfig(leader_election=False, namespaces=(ns,)), api)
    reconciler = manager.reconciler
    # as with --prometheus-url: the autoscaler owns desiredReplicas
    reconciler.autoscaler = AutoscalerRunning()  # type: ignore[assignment]
    manager.applier.start()  # the companion lane (Services, PodDisruptionBudgets) of this loop
    try:
        await manager.load_caches()
        found = reconciler.observe((ns, name))
        assert found is not None
        observed, companions = found
        desired = compute_desired(observed)
        if between is not None:
            between(desired)
        current = [*observed.children, *companions, *observed.pod_monitors]
        result = await manager.applier.apply(
            (ns, name), desired.objects, current, tolerate_missing_pod_monitor_api=True
        )
        await asyncio.wait_for(manager.applier.sent(), 30)
        await reconciler.write_status((ns, name), observed, desired, list(result.rejected))
    finally:
        await asyncio.gather(*manager.applier.stop(), return_exceptions=True)
        reconciler.stop()


@pytest.mark.usefixtures("operator")  # installs the CRD; it does not serve the race-* namespace
def test_a_reconcile_from_an_older_read_never_reverts_an_autoscaler_decision(cluster: E2ECluster) -> None:
    """The autoscaler writes status.desiredReplicas; a reconcile computed from the object as it was
    before that write must not put the old value back (one writer per field, and status writes
    conditional on the resourceVersion they were computed from)."""
    ns = cluster.namespace("race")  # not served by the session operator: this test is the only writer
    doc = small(
        "race",
        autoscaling={"minReplicas": 1, "maxReplicas": 4, "targetQueueLength": 4, "intervalSeconds": 5},
    )
    apply(cluster, ns, doc)
    api_client = k8s_config.new_client_from_config(str(cluster.kubeconfig))
    api = KubeClient(api_client)

    def autoscaler_decides(desired: Desired) -> None:
        assert desired.status["desiredReplicas"] == 1  # computed from the read before the decision
        api.patch_status(ns, "race", {"desiredReplicas": 3, "autoscaler": {"reason": "queue 12 > 4"}})

    try:
        asyncio.run(reconcile_once(api, ns, "race", autoscaler_decides))
    except ApiException as exc:
        assert exc.status == 409  # the stale status write was refused
    status = glmd(cluster, ns, "race")["status"]
    assert status["desiredReplicas"] == 3
    assert status["autoscaler"]["reason"] == "queue 12 > 4"
    # A reconcile from a fresh read keeps it too, and spreads 3 replicas over the children.
    try:
        asyncio.run(reconcile_once(api, ns, "race"))
        assert glmd(cluster, ns, "race")["status"]["desiredReplicas"] == 3
        assert sum(d["spec"]["replicas"] for d in children(cluster, ns, "race")) == 3
    finally:
        api_client.close()
        delete_namespace(cluster, ns)  # its 3 pods hold L4 GPUs other tests count on
