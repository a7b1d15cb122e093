"""``glm-operator run`` as a subprocess with the chart's ServiceAccount and RBAC (not admin).

Used by the e2e tests, ``make demo`` and the benchmarks: install the CRD and exactly the RBAC of
``manifests/install.yaml``, mint a token for the operator's ServiceAccount, start/stop/kill.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

import yaml

from tests.harness.cluster import LocalCluster, repo_root

OPERATOR_NAMESPACE = "glm-operator-system"
OPERATOR_SA = "glm-operator"
RBAC_KINDS = {
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "CustomResourceDefinition",
}


# Far above any test's duration: every behaviour under test must be driven by watch events, as in
# production; only the test that proves the resync repairs drift asks for a short one.
DEFAULT_RESYNC_SECONDS = 600.0


class RunningOperator:
    """``glm-operator run`` as a subprocess, authenticated as the chart's ServiceAccount (not admin)."""

    def __init__(
        self,
        cluster: LocalCluster,
        workdir: Path,
        namespaces: str = "ctl-*",
        resync_seconds: float = DEFAULT_RESYNC_SECONDS,
    ) -> None:
        self.cluster = cluster
        self.resync_seconds = resync_seconds
        self.workdir = workdir
        self.namespaces = namespaces
        self.kubeconfig = workdir / "operator.kubeconfig"
        self.log_path = workdir / "operator.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.operator_namespace = OPERATOR_NAMESPACE
        # What start() was last given (added to the harness's own arguments and environment), and
        # what the process started last runs with.
        self.args: tuple[str, ...] = ()
        self.env: dict[str, str] = {}
        self.launched: tuple[tuple[str, ...], dict[str, str]] = ((), {})

    def install(
        self,
        manifests: str | None = None,
        service_account: str = OPERATOR_SA,
        namespace: str = OPERATOR_NAMESPACE,
    ) -> None:
        """CRD + ServiceAccount + RBAC exactly as manifests/install.yaml has them, or as
        ``manifests`` (e.g. the chart rendered for a namespaced install) has them; the operator
        then runs as ``service_account`` of ``namespace`` and holds its Lease there."""
        text = (
            manifests if manifests is not None else (repo_root() / "manifests" / "install.yaml").read_text()
        )
        docs = [d for d in yaml.safe_load_all(text) if d]
        wanted = [d for d in docs if d.get("kind") in RBAC_KINDS]
        self.operator_namespace = namespace
        self.cluster.kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump_all(wanted)
        )
        self.cluster.wait_crds_established("glmdeployments.inference.glm.dev")
        token = self.cluster.kubectl(
            "create", "token", service_account, "-n", namespace, "--duration=6h"
        ).stdout.strip()
        cfg = json.loads(self.cluster.kubeconfig.read_text())
        cfg["users"] = [{"name": "operator", "user": {"token": token}}]
        cfg["contexts"][0]["context"]["user"] = "operator"
        self.kubeconfig.write_text(json.dumps(cfg))

    def start(self, *extra: str, env: Mapping[str, str] | None = None, remember: bool = True) -> None:
        """Start ``glm-operator run`` with ``extra`` arguments and ``env`` on top of the harness's own.

        They are remembered (unless ``remember=False``: for this run only): ``start()`` with
        neither runs it with the remembered ones, as a test that stopped the operator means when it
        starts it again, so no restart drops a flag such as the session's ``--node-grace-seconds``.
        ``restarted_on_exit`` restarts it exactly as it last ran.
        """
        if extra or env is not None:
            args, run_env = tuple(extra), dict(env or {})
            if remember:
                self.args, self.env = args, run_env
        else:
            args, run_env = self.args, self.env
        self._launch(args, run_env)

    def _launch(self, extra: tuple[str, ...], extra_env: dict[str, str]) -> None:
        self.launched = (extra, extra_env)
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "POD_NAMESPACE": self.operator_namespace,
            # Stable across restarts, like a pod's name when its container restarts: a restarted
            # leader may take its own Lease back at once.
            "POD_NAME": f"glm-operator-{self.workdir.name}",
            "MALLOC_ARENA_MAX": "2",  # as the image sets it (Containerfile)
            **extra_env,
        }
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "glm_operator.cli", "run",
                *self._scope_args(),
                "--resync-seconds", str(self.resync_seconds),
                "--leader-election-namespace", self.operator_namespace,
                "--log-level", "info",
                *extra,
            ],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True,
        )  # fmt: skip
        log.close()

    @contextlib.contextmanager
    def restarted_on_exit(self) -> Iterator[list[int]]:
        """Restart the operator whenever it exits, as the kubelet restarts a container (with the
        same arguments and environment); yields the list of exit codes seen."""
        codes: list[int] = []
        done = threading.Event()

        def watch() -> None:
            while not done.wait(0.5):
                proc = self.proc
                if proc is not None and proc.poll() is not None:
                    codes.append(int(proc.returncode))
                    self._launch(*self.launched)

        thread = threading.Thread(target=watch, daemon=True)
        thread.start()
        try:
            yield codes
        finally:
            done.set()
            thread.join()

    def _scope_args(self) -> list[str]:
        """``--namespace`` once per comma-separated pattern; none: ``--all-namespaces``."""
        patterns = [p for p in self.namespaces.split(",") if p]
        return [arg for p in patterns for arg in ("--namespace", p)] or ["--all-namespaces"]

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""
