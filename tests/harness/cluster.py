"""A real local Kubernetes control plane with simulated GPU nodes, on loopback.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler run as plain processes built
from Go modules (``hack/build-tools.sh``); KWOK plays the kubelet for fake nodes so the real
scheduler binds pods and KWOK marks them Running/Ready. Every component listens on 127.0.0.1
on a free port; the admin kubeconfig is written to ``<state_dir>/kubeconfig``. With
``apiserver_only`` just etcd and kube-apiserver run (the integration tests): the API, its
validation, admission and CRDs, but no controller (no default ServiceAccount, no namespace
deletion), no scheduler and no node.

Safety: KWOK gives fake pods 10.x IPs and Services get ClusterIPs from 10.96.0.0/16. Nothing
here (and nothing in the tests) dials those addresses: only the apiserver on loopback.

State lives in ``state_dir`` (``state.json`` with pids and ports, logs, etcd data). ``up()`` is
idempotent (it reuses a healthy cluster) and ``down()`` stops every process group it started.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
APISERVER_COMPONENTS = COMPONENTS[:2]
# With ``ha``: the second apiserver and the load balancer in front of both.
HA_COMPONENTS = ("kube-apiserver-2", "haproxy")
SERVICE_CIDR = "10.96.0.0/16"
T = TypeVar("T")


# Writes to the objects between a Deployment and its Ready pods, and to nodes, at Metadata level
# (who, what, when, the answer's code; no bodies); nothing else.
AUDIT_POLICY: dict[str, Any] = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {
            "level": "Metadata",
            "verbs": ["create", "update", "patch", "delete"],
            "resources": [
                {
                    "group": "apps",
                    "resources": ["deployments", "deployments/status", "replicasets", "replicasets/status"],
                },
                {"group": "", "resources": ["pods", "pods/status", "pods/binding", "nodes", "nodes/status"]},
                {"group": "inference.glm.dev", "resources": ["glmdeployments/status"]},
            ],
        },
        {"level": "None"},
    ],
}


class ClusterError(RuntimeError):
    """The local cluster could not be started or reached."""


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


# KWOK stages of our own, beside the module's "fast" ones (hack/build-tools.sh copies those)
KWOK_STAGES = repo_root() / "tests" / "fixtures" / "kwok-stages"


def haproxy_binary() -> str:
    """Path of the haproxy binary, or a RuntimeError saying how to install it."""
    candidates = [os.environ.get("HAPROXY_BIN"), shutil.which("haproxy"), "/usr/sbin/haproxy"]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise RuntimeError(
        "haproxy not found: install it (apt-get install haproxy; .ci/run does) or set HAPROXY_BIN"
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def default_bin_dir() -> Path:
    """The cached tools directory, as hack/tools-bin.sh computes it."""
    env = os.environ.get("GLM_OPERATOR_TOOLS_BIN")
    if env:
        return Path(env)
    out = subprocess.run(
        ["bash", str(repo_root() / "hack" / "tools-bin.sh")], capture_output=True, text=True, check=True
    )
    return Path(out.stdout.strip())


def default_state_dir() -> Path:
    return Path(os.environ.get("GLM_CLUSTER_DIR", str(repo_root() / ".cluster")))


@dataclass
class LocalCluster:
    state_dir: Path = field(default_factory=default_state_dir)
    bin_dir: Path = field(default_factory=default_bin_dir)
    # component -> flags appended to its command line (e.g. a benchmark's node-monitor grace)
    extra_args: Mapping[str, Sequence[str]] = field(default_factory=dict)
    # etcd and kube-apiserver only: no controller-manager, scheduler or KWOK
    apiserver_only: bool = False
    # write the apiserver's audit log of writes to workloads, pods and nodes (logs/audit.log, JSON
    # lines; tests.harness.audit reads it): which client wrote what, when, and the answer's code
    audit: bool = False
    # a highly available control plane: a second kube-apiserver on the same etcd and an HAProxy in
    # front of both (TCP, /readyz health checks), as kubeadm's HA guide sets up; the controller-manager,
    # the scheduler and KWOK (the kubelets) reach the API through it. The admin kubeconfig, and what
    # tests start with it (the operator), talks to the first apiserver directly: stopping that one is
    # an outage for them alone (tests.harness.faults.ApiserverOutage).
    ha: bool = False

    @property
    def components(self) -> tuple[str, ...]:
        if self.apiserver_only:
            return APISERVER_COMPONENTS
        return COMPONENTS + HA_COMPONENTS if self.ha else COMPONENTS

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def state_file(self) -> Path:
        return self.state_dir / "state.json"

    # -- state -------------------------------------------------------------------------------
    def _read_state(self) -> dict[str, object]:
        try:
            data = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _write_state(self, state: dict[str, object]) -> None:
        self.state_file.write_text(json.dumps(state, indent=2))

    def _pids(self) -> dict[str, int]:
        pids = self._read_state().get("pids", {})
        return {str(k): int(v) for k, v in pids.items()} if isinstance(pids, dict) else {}

    def server_url(self) -> str | None:
        url = self._read_state().get("server")
        return str(url) if url else None

    def token(self) -> str | None:
        tok = self._read_state().get("token")
        return str(tok) if tok else None

    # -- health ------------------------------------------------------------------------------
    def _apiserver_ready(self, server: str, token: str, timeout: float = 2.0) -> bool:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        req = urllib.request.Request(f"{server}/readyz", headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def is_running(self) -> bool:
        server, token = self.server_url(), self.token()
        pids = self._pids()
        if not server or not token or set(pids) != set(self.components):
            return False
        if not all(_alive(pid) for pid in pids.values()):
            return False
        return self._apiserver_ready(server, token)

    # -- lifecycle ---------------------------------------------------------------------------
    def up(self, nodes: Sequence[Path] = (), timeout: float = 120.0) -> bool:
        """Start the cluster unless a healthy one is running. Returns True if it started one."""
        if nodes and self.apiserver_only:
            raise ClusterError("no node can be Ready without KWOK: nodes need apiserver_only=False")
        if self.is_running():
            if nodes:
                self.apply_nodes(nodes)
            return False
        self.down()
        binaries = [c for c in self.components if c not in HA_COMPONENTS]
        missing = [c for c in (*binaries, "kubectl") if not (self.bin_dir / c).exists()]
        if missing:
            raise ClusterError(
                f"missing binaries in {self.bin_dir}: {', '.join(missing)}; run hack/build-tools.sh first"
            )
        sd = self.state_dir
        for sub in ("etcd", "certs", "logs"):
            shutil.rmtree(sd / sub, ignore_errors=True)
            (sd / sub).mkdir(parents=True, exist_ok=True)
        controllers = () if self.apiserver_only else ("kcm", "sched", "kwok")
        ports = {name: free_port() for name in ("etcd", "etcd_peer", "apiserver", *controllers)}
        token = secrets.token_hex(16)
        (sd / "tokens.csv").write_text(f"{token},admin,admin,system:masters\n")
        sa_key = sd / "certs" / "sa.key"
        subprocess.run(["openssl", "genrsa", "-out", str(sa_key), "2048"], check=True, capture_output=True)
        server = f"https://127.0.0.1:{ports['apiserver']}"
        state: dict[str, object] = {"server": server, "token": token, "ports": ports, "pids": {}}
        self._write_state(state)
        pids: dict[str, int] = {}

        def start(name: str, args: list[str], binary: str | None = None) -> None:
            log = open(sd / "logs" / f"{name}.log", "wb")  # noqa: SIM115 - owned by the child
            proc = subprocess.Popen(
                [binary or str(self.bin_dir / name), *args, *self.extra_args.get(name, ())],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            log.close()
            pids[name] = proc.pid
            state["pids"] = pids
            self._write_state(state)

        etcd_url = f"http://127.0.0.1:{ports['etcd']}"
        start(
            "etcd",
            [
                f"--data-dir={sd / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{ports['etcd_peer']}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{ports['etcd_peer']}",
                f"--initial-cluster=default=http://127.0.0.1:{ports['etcd_peer']}",
                "--unsafe-no-fsync",
                "--quota-backend-bytes=4294967296",
                "--log-level=warn",
            ],
        )
        apiserver_args = [
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={ports['apiserver']}",
            f"--cert-dir={sd / 'certs'}",
            f"--token-auth-file={sd / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={sa_key}",
            f"--service-account-signing-key-file={sa_key}",
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true",
            "--profiling=false",
            "--v=0",
        ]
        start("kube-apiserver", [*apiserver_args, *self._audit_args(self.audit_log)])
        deadline = time.monotonic() + timeout
        while not self._apiserver_ready(server, token, timeout=1.0):
            self._check_children(pids)
            if time.monotonic() > deadline:
                raise ClusterError(f"kube-apiserver not ready after {timeout:.0f}s; see {sd / 'logs'}")
            time.sleep(0.3)
        self._write_kubeconfig(server, token)
        if self.apiserver_only:
            return True
        components_kubeconfig = self.kubeconfig
        if self.ha:
            ports["apiserver2"], ports["balancer"] = free_port(), free_port()
            state["ports"] = ports
            components_kubeconfig = self._start_ha(
                start, apiserver_args, ports, token, lambda: pids, deadline
            )
        kube_crt = sd / "certs" / "apiserver.crt"
        start(
            "kube-controller-manager",
            [
                f"--kubeconfig={components_kubeconfig}",
                f"--authentication-kubeconfig={components_kubeconfig}",
                f"--authorization-kubeconfig={components_kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports['kcm']}",
                "--leader-elect=false",
                f"--service-account-private-key-file={sa_key}",
                f"--root-ca-file={kube_crt}",
                "--use-service-account-credentials=false",
                # HPA needs a short sync to be testable; the rest keeps its defaults.
                "--horizontal-pod-autoscaler-sync-period=5s",
                "--v=0",
            ],
        )
        start(
            "kube-scheduler",
            [
                f"--kubeconfig={components_kubeconfig}",
                f"--authentication-kubeconfig={components_kubeconfig}",
                f"--authorization-kubeconfig={components_kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports['sched']}",
                "--leader-elect=false",
                "--v=0",
            ],
        )
        stage_args = [f"--config={p}" for p in sorted((self.bin_dir.parent / "kwok-stages").glob("*.yaml"))]
        if not stage_args:
            raise ClusterError(f"no KWOK stage files in {self.bin_dir.parent / 'kwok-stages'}")
        # and what a kubelet does that KWOK's own stages leave out (each file says what)
        stage_args += [f"--config={p}" for p in sorted(KWOK_STAGES.glob("*.yaml"))]
        start(
            "kwok",
            [
                f"--kubeconfig={components_kubeconfig}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                f"--server-address=127.0.0.1:{ports['kwok']}",
                "--node-ip=127.0.0.2",
                "--cidr=10.0.0.0/16",
                # Leases are the heartbeat the node-heartbeat-with-lease stage expects; without them
                # the node lifecycle controller marks nodes unhealthy after 40 s and pods NotReady.
                "--node-lease-duration-seconds=40",
                *stage_args,
            ],
        )
        self._wait_for_default_service_account(deadline)
        if nodes:
            self.apply_nodes(nodes)
        return True

    def _start_ha(
        self,
        start: Callable[..., None],
        apiserver_args: Sequence[str],
        ports: Mapping[str, int],
        token: str,
        pids: Callable[[], dict[str, int]],
        deadline: float,
    ) -> Path:
        """The second apiserver and the balancer in front of both (``ha``); the kubeconfig of the
        balancer, which the controller-manager, the scheduler and KWOK use."""
        second = [a for a in apiserver_args if not a.startswith("--secure-port=")]
        second += [f"--secure-port={ports['apiserver2']}", *self._audit_args(self.audit_log_2)]
        start("kube-apiserver-2", second, binary=str(self.bin_dir / "kube-apiserver"))
        start("haproxy", ["-db", "-f", str(self._write_balancer_config(ports))], binary=haproxy_binary())
        balancer = self.state_dir / "kubeconfig-balancer"
        for port, path in ((ports["apiserver2"], self.second_kubeconfig), (ports["balancer"], balancer)):
            while not self._apiserver_ready(f"https://127.0.0.1:{port}", token, timeout=1.0):
                self._check_children(pids())
                if time.monotonic() > deadline:
                    raise ClusterError(f"127.0.0.1:{port} not ready in time; see {self.state_dir / 'logs'}")
                time.sleep(0.3)
            self._write_kubeconfig(f"https://127.0.0.1:{port}", token, path)
        return balancer

    def _audit_args(self, path: Path) -> list[str]:
        if not self.audit:
            return []
        policy = self.state_dir / "audit-policy.yaml"
        policy.write_text(json.dumps(AUDIT_POLICY))
        return [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={path}",
            "--audit-log-format=json",
            "--audit-log-mode=batch",
            "--audit-log-batch-max-wait=1s",
        ]

    @property
    def audit_log(self) -> Path:
        return self.state_dir / "logs" / "audit.log"

    @property
    def audit_log_2(self) -> Path:
        """The second apiserver's audit log (``ha``)."""
        return self.state_dir / "logs" / "audit-2.log"

    @property
    def second_kubeconfig(self) -> Path:
        """Admin kubeconfig of the second apiserver (``ha``)."""
        return self.state_dir / "kubeconfig-apiserver-2"

    def _write_balancer_config(self, ports: Mapping[str, int]) -> Path:
        """HAProxy in TCP mode before both apiservers: a server is used while its /readyz answers 200
        (checked every second), and a connection refused goes to the other at once (redispatch)."""
        config = self.state_dir / "haproxy-apiservers.cfg"
        config.write_text(
            "global\n  maxconn 4096\n"
            "defaults\n  mode tcp\n  timeout connect 2s\n  timeout client 1h\n  timeout server 1h\n"
            "  retries 2\n  option redispatch\n"
            f"frontend apiservers\n  bind 127.0.0.1:{ports['balancer']}\n  default_backend apiservers\n"
            "backend apiservers\n  balance roundrobin\n  option httpchk GET /readyz\n"
            "  http-check expect status 200\n"
            "  default-server check check-ssl verify none inter 1s fall 2 rise 1\n"
            f"  server first 127.0.0.1:{ports['apiserver']}\n"
            f"  server second 127.0.0.1:{ports['apiserver2']}\n"
        )
        return config

    def _check_children(self, pids: dict[str, int]) -> None:
        for name, pid in pids.items():
            if not _alive(pid):
                log = self.state_dir / "logs" / f"{name}.log"
                tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                raise ClusterError(f"{name} exited during start-up; last log lines:\n{tail}")

    def _wait_for_default_service_account(self, deadline: float) -> None:
        while True:
            res = self.kubectl("get", "serviceaccount", "default", "-n", "default", check=False)
            if res.returncode == 0:
                return
            self._check_children(self._pids())
            if time.monotonic() > deadline:
                raise ClusterError("controller-manager did not create the default ServiceAccount")
            time.sleep(0.3)

    def _write_kubeconfig(self, server: str, token: str, path: Path | None = None) -> None:
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            # The apiserver's self-signed serving certificate (cert + its CA) is valid for 127.0.0.1.
            "clusters": [
                {
                    "name": "local",
                    "cluster": {
                        "server": server,
                        "certificate-authority": str(self.state_dir / "certs" / "apiserver.crt"),
                    },
                }
            ],
            "users": [{"name": "admin", "user": {"token": token}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": "admin"}}],
            "current-context": "local",
        }
        # JSON is valid YAML; kubectl and the Python client both read it.
        path = path or self.kubeconfig
        path.write_text(json.dumps(cfg, indent=2))
        path.chmod(0o600)

    def apply_nodes(self, files: Sequence[Path], timeout: float = 60.0) -> None:
        for f in files:
            self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(f))
        self.kubectl("wait", "--for=condition=Ready", "node", "-l", "type=kwok", f"--timeout={timeout:.0f}s")

    def register_extra_process(self, name: str, pid: int) -> None:
        """A process started beside the cluster (the demo's operator) that ``down()`` must stop too."""
        state = self._read_state()
        extra = dict(state.get("extra_pids") or {})  # type: ignore[call-overload]
        extra[name] = pid
        state["extra_pids"] = extra
        self._write_state(state)

    def stop_extra_processes(self) -> None:
        """Stop processes registered beside the cluster (e.g. the demo's operator)."""
        state = self._read_state()
        extra = state.pop("extra_pids", None) or {}
        for pid in extra.values() if isinstance(extra, dict) else []:
            stop_process_group(int(pid))
        if state:
            self._write_state(state)

    # -- optional components (e.g. tests.harness.lws) -----------------------------------
    def start_component(
        self, name: str, argv: Sequence[str], env: dict[str, str], info: dict[str, object]
    ) -> int:
        """Start an optional component (own process group, log in logs/<name>.log, restarted when
        it exits) and record it.

        ``info`` (ports and the like) is kept in the state beside the pid. ``down()`` stops it;
        ``stop_extra_processes()`` does not (a reused cluster keeps its components).
        """
        log = open(self.state_dir / "logs" / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child
        # Restarted when it exits, as a kubelet restarts a controller's pod: controller-runtime
        # managers exit on purpose when they lose their leader election (e.g. an apiserver outage).
        supervised = [
            "bash",
            "-c",
            'while true; do "$@"; echo "exited $?, restarting" >&2; sleep 2; done',
            name,
        ]
        proc = subprocess.Popen(
            [*supervised, *argv],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **env},
            start_new_session=True,
        )
        log.close()
        state = self._read_state()
        components = dict(state.get("components") or {})  # type: ignore[call-overload]
        components[name] = {**info, "pid": proc.pid}
        state["components"] = components
        self._write_state(state)
        return proc.pid

    def component(self, name: str) -> dict[str, Any] | None:
        """What ``start_component`` recorded for ``name`` (pid and info), if anything."""
        components = self._read_state().get("components") or {}
        entry = components.get(name) if isinstance(components, dict) else None
        return dict(entry) if isinstance(entry, dict) else None

    def component_alive(self, name: str) -> bool:
        entry = self.component(name)
        return entry is not None and _alive(int(entry["pid"]))

    def stop_component(self, name: str) -> None:
        state = self._read_state()
        components = dict(state.get("components") or {})  # type: ignore[call-overload]
        entry = components.pop(name, None)
        if isinstance(entry, dict):
            stop_process_group(int(entry["pid"]))
        if state:
            state["components"] = components
            self._write_state(state)

    def down(self) -> None:
        """Stop every process this cluster started (whole process groups) and forget the state."""
        self.stop_extra_processes()
        for name in list(self._read_state().get("components") or {}):  # type: ignore[call-overload]
            self.stop_component(name)
        pids = self._pids()
        for pid in pids.values():
            _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in pids.values()) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in pids.values():
            _signal_group(pid, signal.SIGKILL)
        if self.state_file.exists():
            self.state_file.unlink()

    # -- commands ----------------------------------------------------------------------------
    def run_tool(
        self, tool: str, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        res = subprocess.run(
            [str(self.bin_dir / tool), *args],
            input=input,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
        )
        if check and res.returncode != 0:
            raise ClusterError(f"{tool} {' '.join(args)} failed ({res.returncode}): {res.stderr.strip()}")
        return res

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return self.run_tool("kubectl", *args, input=input, check=check, timeout=timeout)

    def service_account_kubeconfig(
        self, account: str, namespace: str, path: Path, duration: str = "6h"
    ) -> Path:
        """A kubeconfig at ``path`` that acts as ``account`` (a token of it), for a process that must
        run with exactly that ServiceAccount's RBAC."""
        token = self.kubectl(
            "create", "token", account, "-n", namespace, f"--duration={duration}"
        ).stdout.strip()
        cfg = json.loads(self.kubeconfig.read_text())
        cfg["users"] = [{"name": account, "user": {"token": token}}]
        cfg["contexts"][0]["context"]["user"] = account
        path.write_text(json.dumps(cfg))
        path.chmod(0o600)
        return path

    def wait_crds_established(self, *names: str, timeout: float = 60) -> None:
        """Poll until every named CRD is Established. (``kubectl wait --for=condition=Established``
        fails at once on a CRD created a moment ago, whose status has no conditions yet.)"""
        deadline = time.monotonic() + timeout
        pending = list(names)
        while pending:
            query = '{.status.conditions[?(@.type=="Established")].status}'
            res = self.kubectl("get", f"crd/{pending[0]}", "-o", f"jsonpath={query}", check=False)
            if res.returncode == 0 and res.stdout.strip() == "True":
                pending.pop(0)
                continue
            if time.monotonic() > deadline:
                raise ClusterError(f"CRD {pending[0]} not Established within {timeout:.0f}s")
            time.sleep(0.2)

    def helm(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return self.run_tool("helm", *args, input=input, check=check, timeout=timeout)


class SessionCluster:
    """What a tier's session cluster fixture gives its tests: kubeconfig, binaries, kubectl/helm
    runners, fresh namespaces (e2e: the full local cluster; integration: kube-apiserver + etcd)."""

    _counter = itertools.count()

    def __init__(self, local: LocalCluster) -> None:
        self.local = local
        self.kubeconfig: Path = local.kubeconfig
        self.bin_dir: Path = local.bin_dir
        self.namespaces: list[str] = []

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return self.local.kubectl(*args, input=input, check=check, timeout=timeout)

    def helm(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return self.local.helm(*args, input=input, check=check, timeout=timeout)

    def namespace(self, name_prefix: str = "t") -> str:
        name = f"{name_prefix}-{os.getpid()}-{next(self._counter)}"[:63]
        self.kubectl("create", "namespace", name)
        self.namespaces.append(name)
        return name


@contextlib.contextmanager
def session(local: LocalCluster, started: bool) -> Iterator[SessionCluster]:
    """A tier's cluster for the length of its fixture: stopped at the end when this run ``started``
    it (unless ``GLM_KEEP_CLUSTER`` is set), otherwise left up less the namespaces made through it."""
    cluster = SessionCluster(local)
    try:
        yield cluster
    finally:
        if started and not os.environ.get("GLM_KEEP_CLUSTER"):
            local.down()
        else:
            for ns in cluster.namespaces:
                local.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def wait_for(predicate: Callable[[], T], timeout: float = 60.0, what: str = "condition") -> T:
    """Poll ``predicate`` every 0.5 s until it returns something true; return that."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"{what} not reached within {timeout:.0f}s (last: {last!r})")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours still answers kill(0); reap it if it is ours.
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return _not_zombie(pid)
    return done == 0


def _not_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def stop_process_group(pid: int, timeout: float = 10) -> None:
    """SIGTERM a process group, SIGKILL it if still alive after ``timeout``."""
    _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    _signal_group(pid, signal.SIGKILL)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
