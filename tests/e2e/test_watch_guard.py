"""A CRD deleted under a running kopf watch, against the real kube-apiserver (controller.watch_guard).

kopf reconnects a watch the moment its stream ends; when the CRD is already gone the apiserver
answers 404 and kopf stops the whole operator, unless its CRD observer dropped the watch first.
That race lost once in six CI runs (tests/e2e/test_pod_monitor.py). Here kopf's CRD observation is
off (``settings.scanning.disabled``), so the reconnect always meets the 404: the race is lost every
time, on purpose. A small kopf operator watching a throwaway CRD shows:

- without the guard, kopf 1.45 exits with "Multidimensional multitasker has failed" (this is what
  makes the other case mean something; if a kopf upgrade fixes it, this case fails and says so);
- with the guard (what ``glm-operator run`` installs), the operator stays up, warns once, lists
  again with a backoff, and sees objects again once the CRD is back.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import E2ECluster, delete_namespace
from .test_controller import wait_for

pytestmark = pytest.mark.e2e

GROUP = "guard.test.glm.dev"
CRD_NAME = f"widgets.{GROUP}"
CRD = f"""
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {CRD_NAME}
spec:
  group: {GROUP}
  scope: Namespaced
  names: {{plural: widgets, singular: widget, kind: Widget}}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
"""
OPERATOR = f"""
import os

import kopf

from glm_operator.controller import watch_guard


@kopf.on.startup()
def startup(settings, **_):
    settings.scanning.disabled = True  # no CRD observer: the reconnect always meets the 404
    if os.environ["GUARD"] == "1":
        watch_guard.install()
    print("guard installed:", watch_guard.installed(), flush=True)


@kopf.on.event("{GROUP}", "v1", "widgets")
def widget(event, name, **_):
    print("seen widget", name, flush=True)
"""


class KopfProcess:
    def __init__(self, cluster: E2ECluster, tmp_path: Path, ns: str, guard: bool) -> None:
        script = tmp_path / "widgets_operator.py"
        script.write_text(OPERATOR)
        self.log_path = tmp_path / f"kopf-guard-{int(guard)}.log"
        env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "GUARD": "1" if guard else "0"}
        self.log_file = self.log_path.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kopf", "run", "--standalone", "--namespace", ns, str(script)],
            stdout=self.log_file,
            stderr=subprocess.STDOUT,
            env=env,
        )

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log_file.close()


def install_crd(cluster: E2ECluster) -> None:
    cluster.kubectl("apply", "-f", "-", input=CRD)
    cluster.local.wait_crds_established(CRD_NAME)


def delete_crd(cluster: E2ECluster) -> None:
    cluster.kubectl("delete", "crd", CRD_NAME, "--ignore-not-found", "--timeout=60s")


def widget(cluster: E2ECluster, ns: str, name: str) -> None:
    manifest = f"apiVersion: {GROUP}/v1\nkind: Widget\nmetadata: {{name: {name}, namespace: {ns}}}\n"
    cluster.kubectl("apply", "-f", "-", input=manifest)


@pytest.fixture
def widgets(cluster: E2ECluster, tmp_path: Path) -> Iterator[tuple[E2ECluster, Path, str]]:
    ns = cluster.namespace("wg")
    delete_crd(cluster)
    install_crd(cluster)
    try:
        yield cluster, tmp_path, ns
    finally:
        delete_crd(cluster)
        delete_namespace(cluster, ns)


def start_and_see_first_widget(cluster: E2ECluster, tmp_path: Path, ns: str, guard: bool) -> KopfProcess:
    op = KopfProcess(cluster, tmp_path, ns, guard)
    wait_for(lambda: f"guard installed: {guard}" in op.log(), 60, "the kopf operator's start-up")
    widget(cluster, ns, "first")
    wait_for(lambda: "seen widget first" in op.log(), 60, "the first widget seen")
    return op


def test_without_the_guard_kopf_stops_when_the_crd_goes(widgets: tuple[E2ECluster, Path, str]) -> None:
    cluster, tmp_path, ns = widgets
    op = start_and_see_first_widget(cluster, tmp_path, ns, guard=False)
    try:
        delete_crd(cluster)
        wait_for(lambda: op.proc.poll() is not None, 60, "kopf to stop")
        assert "multitasker has failed" in op.log(), op.log()[-3000:]
    finally:
        op.stop()


def test_with_the_guard_the_watch_waits_for_the_crd_and_resumes(
    widgets: tuple[E2ECluster, Path, str],
) -> None:
    cluster, tmp_path, ns = widgets
    op = start_and_see_first_widget(cluster, tmp_path, ns, guard=True)
    try:
        delete_crd(cluster)
        wait_for(lambda: "watch of widgets in" in op.log(), 60, "the guard's warning")
        time.sleep(4)  # backoffs of 1 and 2 s: at least two more failed lists
        assert op.proc.poll() is None, op.log()[-3000:]
        log = op.log()
        assert log.count("APINotFoundError") == 1, "one warning per outage, repeats at debug"
        assert "Traceback" not in log and "has failed" not in log, log[-3000:]

        install_crd(cluster)
        widget(cluster, ns, "second")
        wait_for(lambda: "seen widget second" in op.log(), 60, "a widget after the CRD came back")
        assert "listed again, the API is served" in op.log()
        assert op.proc.poll() is None
    finally:
        op.stop()
