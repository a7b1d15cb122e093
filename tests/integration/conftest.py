"""Fixtures of the integration tests: a real binary, no full cluster.

``cluster`` is kube-apiserver and etcd alone (``LocalCluster(apiserver_only=True)``): the API with
its validation, CEL rules, admission, RBAC and CRDs, but no controller-manager, scheduler, KWOK or
node. So no default ServiceAccount appears in a namespace, a deleted namespace stays Terminating,
and no pod is ever scheduled: a test that needs any of that is an e2e test. Its state is kept in
``.cluster-integration/`` (``GLM_INTEGRATION_CLUSTER_DIR``); a healthy one already running there
(left up by ``GLM_KEEP_CLUSTER=1``) is reused. It lives for this package only: it is stopped
before the e2e tests start their own cluster in the same pytest run. Everything listens on
loopback.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.cluster import LocalCluster, SessionCluster, repo_root, session

INTEGRATION_STATE_DIR = Path(
    os.environ.get("GLM_INTEGRATION_CLUSTER_DIR", str(repo_root() / ".cluster-integration"))
)
_counter = itertools.count()


@pytest.fixture(scope="package")
def cluster() -> Iterator[SessionCluster]:
    local = LocalCluster(state_dir=INTEGRATION_STATE_DIR, apiserver_only=True)
    INTEGRATION_STATE_DIR.mkdir(parents=True, exist_ok=True)
    with session(local, local.up()) as cluster:
        yield cluster


@pytest.fixture
def ns(cluster: SessionCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace named after the test; marked for deletion after it (with no namespace
    controller it stays Terminating until the cluster goes)."""
    base = request.node.name.split("[")[0].removeprefix("test_").replace("_", "-")[:30]
    name = f"it-{base}-{os.getpid()}-{next(_counter)}"[:63].rstrip("-")
    cluster.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
