"""A 90 s apiserver outage with spec changes made during it: everything converges within seconds.

The control plane runs two kube-apiservers on one etcd, as a highly available one does. The one the
operator (and the controller-manager, scheduler and KWOK) talk to goes away for 90 s; through the
other, every one of 20 GLMDeployments gets a new spec meanwhile. The operator loses its Lease
(renew deadline 10 s), exits non-zero and is restarted as the kubelet would, and waits for its
apiserver. The resync period is far above the test's length, so only the start-up list and the
watches can bring the changes in. Once the apiserver is back, every GLMDeployment must show the new
generation planned and its child Deployment rolled to the new arguments within 10 s, with no
duplicate child. Runs on a cluster of its own: the outage makes the other components of the
control plane stale for a while, which no other test should see.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.harness.cluster import LocalCluster
from tests.harness.faults import ApiserverOutage, SecondApiserver

from .conftest import NODES, E2ECluster, RunningOperator, delete_namespace
from .test_controller import apply, children, glmd, manifest, vllm_args, wait_for

pytestmark = pytest.mark.e2e

COUNT = 20
OUTAGE_SECONDS = 90.0
CONVERGE_SECONDS = 10.0


@pytest.fixture(scope="module")
def ha_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[E2ECluster, RunningOperator]]:
    local = LocalCluster(state_dir=tmp_path_factory.mktemp("ha-cluster"))
    local.up(nodes=[NODES])
    operator = RunningOperator(local, tmp_path_factory.mktemp("ha-operator"), namespaces="ha-*")
    try:
        operator.install()
        operator.start()
        yield E2ECluster(local), operator
    finally:
        operator.stop()
        local.down()


def spec(context: int) -> dict[str, object]:
    """GLM-4-9B on any GPU type: 20 of them fit the fixture cluster's GPUs."""
    return {"model": {"id": "zai-org/glm-4-9b-chat"}, "contextLength": context, "gpu": {"products": []}}


def converged(cluster: E2ECluster, ns: str, name: str, context: int) -> bool:
    obj = glmd(cluster, ns, name)
    status = obj.get("status") or {}
    deployments = children(cluster, ns, name)
    return (
        status.get("observedGeneration") == obj["metadata"]["generation"]
        and len(deployments) == 1
        and str(context) in vllm_args(deployments[0])
    )


@pytest.mark.parametrize("leader_election", [True, False], ids=["lease-lost-and-restarted", "stays-up"])
def test_spec_changes_made_during_a_90_s_outage_converge_within_seconds_of_the_return(
    ha_cluster: tuple[E2ECluster, RunningOperator], leader_election: bool
) -> None:
    """With leader election the operator loses its Lease and restarts; without it (one replica,
    ``--no-leader-election``) the same process rides the outage out, with whatever it remembered
    from before it (what it applied, its backoffs)."""
    cluster, operator = ha_cluster
    if not leader_election:
        operator.stop()
        operator.start("--no-leader-election")
    ns = cluster.namespace("ha")
    names = [f"g{i:02d}" for i in range(COUNT)]
    for name in names:
        apply(cluster, ns, manifest(name, **spec(8192)))
    wait_for(lambda: all(converged(cluster, ns, n, 8192) for n in names), 120, "20 GLMDeployments planned")

    second = SecondApiserver(cluster.local)
    second.start()
    with operator.restarted_on_exit() as exit_codes:
        outage = ApiserverOutage(cluster.local)
        try:
            for name in names:  # through the other apiserver, while the operator's is away
                second.kubectl(
                    "patch", "glmd", name, "-n", ns, "--type=merge", "-p", '{"spec":{"contextLength":4096}}'
                )
            time.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - outage.stopped_at)))
        finally:
            back = outage.restore()
            second.stop()
        pending = set(names)
        while pending and time.monotonic() - back < 60:
            pending = {n for n in pending if not converged(cluster, ns, n, 4096)}
            time.sleep(0.2)
        took = time.monotonic() - back
    print(f"\nall {COUNT} converged {took:.1f} s after the apiserver was back; operator exits {exit_codes}")
    assert not pending, f"not converged 60 s after the return: {sorted(pending)}"
    assert took <= CONVERGE_SECONDS, f"{took:.1f} s"
    if leader_election:
        assert 1 in exit_codes, "the operator lost its Lease during the outage and exited non-zero"
    else:
        assert exit_codes == [], "without leader election the process stays up"
    delete_namespace(cluster, ns)
