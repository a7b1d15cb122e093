"""A CRD deleted under a running kopf watch, against the real kube-apiserver (controller.watches).

kopf reconnects a watch the moment its stream ends; when the CRD is already gone the apiserver
answers 404 and kopf stops the whole operator, unless its CRD observer dropped the watch first.
That race lost once in six CI runs (tests/e2e/test_pod_monitor.py). Here kopf's CRD observation is
off (``settings.scanning.disabled``), so the reconnect always meets the 404: the race is lost every
time, on purpose. A small operator watching a throwaway CRD shows:

- run as kopf runs by itself, kopf exits with "Multidimensional multitasker has failed" (this is
  what makes the other case mean something; if a kopf upgrade fixes it, this case fails and says so);
- run as ``glm-operator run`` runs it (``WatchThread``: kopf in a thread of its own, started again
  when it stops), the process stays up, warns, lists and watches again with a backoff, and sees
  objects again once the CRD is back.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.cluster import SessionCluster, wait_for

pytestmark = pytest.mark.integration

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
import sys
import time

import kopf

from glm_operator.controller.watches import WatchThread, settings

registry = kopf.OperatorRegistry()
kopf.on.login(registry=registry)(kopf.login_via_client)


@kopf.on.event("{GROUP}", "v1", "widgets", registry=registry)
async def widget(event, name, **_):
    print("seen widget", name, flush=True)


runs = []


def without_crd_observer():
    # The first run: no CRD observer, so the reconnect always meets the 404. The runs after a
    # restart use the operator's own settings (kopf's CRD observer finds the CRD when it is back).
    s = settings()
    s.scanning.disabled = not runs
    runs.append(1)
    return s


namespace = sys.argv[2]
if sys.argv[1] == "kopf":
    print("started", flush=True)
    kopf.run(registry=registry, settings=without_crd_observer(), standalone=True, namespaces=[namespace])
else:
    WatchThread(registry, (namespace,), settings_factory=without_crd_observer).start()
    print("started", flush=True)
    while True:
        time.sleep(1)
"""


class KopfProcess:
    def __init__(self, cluster: SessionCluster, tmp_path: Path, ns: str, restart: bool) -> None:
        script = tmp_path / "widgets_operator.py"
        script.write_text(OPERATOR)
        self.log_path = tmp_path / f"widgets-{'thread' if restart else 'kopf'}.log"
        env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
        self.log_file = self.log_path.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, str(script), "thread" if restart else "kopf", ns],
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


def install_crd(cluster: SessionCluster) -> None:
    cluster.kubectl("apply", "-f", "-", input=CRD)
    cluster.local.wait_crds_established(CRD_NAME)


def delete_crd(cluster: SessionCluster) -> None:
    cluster.kubectl("delete", "crd", CRD_NAME, "--ignore-not-found", "--timeout=60s")


def widget(cluster: SessionCluster, ns: str, name: str) -> None:
    manifest = f"apiVersion: {GROUP}/v1\nkind: Widget\nmetadata: {{name: {name}, namespace: {ns}}}\n"
    cluster.kubectl("apply", "-f", "-", input=manifest)


@pytest.fixture
def widgets(cluster: SessionCluster, ns: str, tmp_path: Path) -> Iterator[tuple[SessionCluster, Path, str]]:
    delete_crd(cluster)
    install_crd(cluster)
    try:
        yield cluster, tmp_path, ns
    finally:
        delete_crd(cluster)


def start_and_see_first_widget(
    cluster: SessionCluster, tmp_path: Path, ns: str, restart: bool
) -> KopfProcess:
    op = KopfProcess(cluster, tmp_path, ns, restart)
    wait_for(lambda: "started" in op.log(), 60, "the operator's start-up")
    widget(cluster, ns, "first")
    wait_for(lambda: "seen widget first" in op.log(), 60, "the first widget seen")
    return op


def test_kopf_by_itself_stops_when_the_crd_goes(widgets: tuple[SessionCluster, Path, str]) -> None:
    cluster, tmp_path, ns = widgets
    op = start_and_see_first_widget(cluster, tmp_path, ns, restart=False)
    try:
        delete_crd(cluster)
        wait_for(lambda: op.proc.poll() is not None, 60, "kopf to stop")
        assert "multitasker has failed" in op.log(), op.log()[-3000:]
    finally:
        op.stop()


def test_in_the_watch_thread_kopf_is_started_again_and_sees_the_crd_come_back(
    widgets: tuple[SessionCluster, Path, str],
) -> None:
    cluster, tmp_path, ns = widgets
    op = start_and_see_first_widget(cluster, tmp_path, ns, restart=True)
    try:
        delete_crd(cluster)
        wait_for(lambda: "listing and watching again" in op.log(), 60, "the restart warning")
        time.sleep(4)  # restarts after 1 and 2 s: at least two more runs that fail the same way
        assert op.proc.poll() is None, op.log()[-3000:]
        log = op.log()
        assert log.count("listing and watching again in 1 s") == 1, "the backoff doubles"

        install_crd(cluster)
        widget(cluster, ns, "second")
        wait_for(lambda: "seen widget second" in op.log(), 90, "a widget after the CRD came back")
        assert op.proc.poll() is None
    finally:
        op.stop()
