"""Session fixture: a real local control plane (etcd, kube-apiserver, controller-manager,
scheduler) with KWOK-simulated GPU nodes from tests/fixtures/gpu-cluster.yaml, the real
LeaderWorkerSet controller and the Gateway API Inference Extension's InferencePool CRD (both before
the operator, which looks for their APIs at start-up).

The tests keep their cluster's state in ``.cluster-e2e/`` (``GLM_E2E_CLUSTER_DIR``), apart from
the one ``make demo`` and ``make cluster`` run in ``.cluster/``: the demo's samples hold GPUs and its
operator serves every namespace, so sharing that cluster would make the tests depend on what the
demo did. A cluster already running there (left up by ``GLM_KEEP_CLUSTER=1``) is reused; otherwise
one is started for the session and stopped at the end. Everything listens on loopback.
"""

from __future__ import annotations

import itertools
import os
import re
import time
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from tests.harness import inference_extension
from tests.harness.cluster import LocalCluster, SessionCluster, repo_root, session
from tests.harness.lws import LeaderWorkerSetController
from tests.harness.operator import RunningOperator
from tests.harness.vllm_emulator import VLLMMetricsEmulator

NODES = repo_root() / "tests" / "fixtures" / "gpu-cluster.yaml"
# Short enough for test_node_outage to wait it out, longer than its 60 s blip.
NODE_GRACE_SECONDS = 80
E2E_STATE_DIR = Path(os.environ.get("GLM_E2E_CLUSTER_DIR", str(repo_root() / ".cluster-e2e")))
_counter = itertools.count()
# An apiserver refusal as kopf, aiohttp and the kubernetes client print it ("403, message='Forbidden'",
# "'code': 403", "Reason: Forbidden"), never the milliseconds of a log timestamp ("05:50:46,403").
_FORBIDDEN = re.compile(r"forbidden|(?<![,.\d])403(?!\d)", re.IGNORECASE)


def forbidden_lines(log: str) -> list[str]:
    """Lines of an operator log that show the apiserver refusing a request (403)."""
    return [line for line in log.splitlines() if _FORBIDDEN.search(line)]


# What e2e tests get: kubeconfig, binaries, kubectl/helm runners, fresh namespaces.
E2ECluster = SessionCluster


def delete_namespace(cluster: E2ECluster, name: str, timeout: float = 60, until_gone: bool = False) -> None:
    """Delete a namespace and return once its pods are gone, so they no longer hold GPUs.

    The namespace controller would take about 10 s per namespace (and 60 s or more for a pod on a
    node deleted meanwhile, until the pod GC takes it): it waits out the pods' grace period,
    which only a kubelet would use. KWOK pods run no container, so the pods are deleted at once
    (``--grace-period=0 --force``) after the namespace is marked for deletion (no new pod can be
    made in it then), and the rest of the namespace goes in the background. ``until_gone``: wait
    for the namespace itself, through the namespace controller alone (what a test of that path
    needs)."""
    if until_gone:
        cluster.kubectl(
            "delete", "namespace", name, "--ignore-not-found", f"--timeout={timeout:.0f}s", check=False
        )
        return
    cluster.kubectl("delete", "namespace", name, "--ignore-not-found", "--wait=false", check=False)
    deadline = time.monotonic() + timeout
    while True:
        cluster.kubectl(
            "delete", "pods", "--all", "-n", name, "--grace-period=0", "--force", "--wait=false", check=False
        )
        left = cluster.kubectl("get", "pods", "-n", name, "-o", "name", check=False).stdout.strip()
        if not left or time.monotonic() > deadline:
            return
        time.sleep(0.5)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Keep each phase's report on the test item, so fixtures can tell a failed test at teardown."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


def dump_namespace(cluster: E2ECluster, name: str) -> None:
    """What a failed test's namespace held (shown under "Captured stdout teardown"): the
    GLMDeployments' status, the pods and where they run, the Events, the nodes' readiness, taints
    and GPUs in use."""
    print(f"==== state of namespace {name} after the failure ====")
    for args in (
        ("get", "glmd", "-n", name, "-o", "jsonpath={range .items[*]}{.metadata.name} gen "
         "{.metadata.generation}: {.status}{'\\n'}{end}"),
        ("get", "deployments,leaderworkersets,pods", "-n", name, "-o", "wide"),
        ("get", "events", "-n", name, "--sort-by=.lastTimestamp"),
        ("get", "nodes"),
        ("describe", "nodes", "--show-events=false"),
    ):  # fmt: skip
        out = cluster.kubectl(*args, check=False)
        text = out.stdout + out.stderr
        if args[0] == "describe":  # only each node's name, taints and allocated GPUs
            kept = ("Name:", "Taints:", "  nvidia.com/gpu ")
            text = "\n".join(line for line in text.splitlines() if line.startswith(kept))
        print(f"$ kubectl {' '.join(args)}\n{text}")


@pytest.fixture
def ns(cluster: E2ECluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace named ctl-<test> (served by the operator fixture), deleted after the test;
    when the test failed, its state is printed first."""
    base = request.node.name.split("[")[0].removeprefix("test_").replace("_", "-")[:30]
    name = f"ctl-{base}-{next(_counter)}"
    cluster.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed:
            dump_namespace(cluster, name)
            if "operator" in request.fixturenames:
                operator: RunningOperator = request.getfixturevalue("operator")
                print("==== the operator's log, last lines ====\n" + operator.log_tail(8000))
        delete_namespace(cluster, name)


@pytest.fixture(scope="session")
def cluster() -> Iterator[E2ECluster]:
    local = LocalCluster(state_dir=E2E_STATE_DIR)
    E2E_STATE_DIR.mkdir(parents=True, exist_ok=True)
    started = local.up(nodes=[NODES])
    local.stop_extra_processes()  # a reused cluster's extra processes would compete for the Lease
    with session(local, started) as e2e:
        LeaderWorkerSetController(local).up()
        inference_extension.install_crd(local)  # before the operator asks discovery for it
        yield e2e


@pytest.fixture(scope="session")
def operator(cluster: E2ECluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningOperator]:
    op = RunningOperator(cluster.local, tmp_path_factory.mktemp("operator"))
    op.install()
    op.start("--node-grace-seconds", str(NODE_GRACE_SECONDS))
    try:
        yield op
    finally:
        op.stop()


@pytest.fixture
def emulators() -> Iterator[list[VLLMMetricsEmulator]]:
    """vLLM emulators a test starts (appending them); stopped after it."""
    started: list[VLLMMetricsEmulator] = []
    yield started
    for emulator in started:
        emulator.stop()
