"""A namespaced install: the operator runs under the chart's namespaced RBAC (Roles in the watched
namespaces, a ClusterRole for cluster-scoped reads only) and reconciles in those namespaces only."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.harness.chart import template

from .conftest import E2ECluster, RunningOperator, delete_namespace, forbidden_lines
from .test_controller import apply, children, glmd, phase_is, small, wait_for

pytestmark = pytest.mark.e2e


def test_a_namespaced_install_reconciles_its_namespaces_under_the_charts_rbac(
    cluster: E2ECluster, operator: RunningOperator, tmp_path: Path
) -> None:
    operator_ns = cluster.namespace("nsop")
    watched = [cluster.namespace("nsa"), cluster.namespace("nsb")]
    other = cluster.namespace("nso")
    release = f"glmns-{os.getpid()}"
    rendered = template(
        cluster,
        release,
        operator_ns,
        "replicaCount=0",
        "crds.install=false",
        f"watchNamespaces={{{','.join(watched)}}}",
        f"fullnameOverride={release}",
    )
    scoped = RunningOperator(cluster.local, tmp_path, namespaces=",".join(watched))
    scoped.install(rendered, service_account=release, namespace=operator_ns)
    try:
        scoped.start()
        for i, ns in enumerate([*watched, other]):
            apply(cluster, ns, small(f"m{i}"))
        for i, ns in enumerate(watched):
            wait_for(phase_is(cluster, ns, f"m{i}", "Ready"), 90, f"m{i} Ready in {ns}")
            assert len(children(cluster, ns, f"m{i}")) == 1
        time.sleep(3)
        assert not glmd(cluster, other, "m2").get("status"), "a namespace outside the install was served"
        assert not children(cluster, other, "m2")
        log = scoped.log_tail(200_000)
        assert "became leader" in log
        assert not forbidden_lines(log), log[-3000:]
    finally:
        scoped.stop()
        cluster.kubectl(
            "delete", "--ignore-not-found", "--wait=false", "-f", "-", input=rendered, check=False
        )
        for ns in [*watched, other]:
            delete_namespace(cluster, ns)  # their pods hold L4 GPUs other tests count on
