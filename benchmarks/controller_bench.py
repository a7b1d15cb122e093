"""Controller at scale: 1,000 simulated GPU nodes, 200 GLMDeployments applied in a burst.

Usage: .venv/bin/python benchmarks/controller_bench.py [--nodes 1000] [--glmds 200] [--namespaces 10]
       [--idle-seconds 600]

Starts its own local control plane (etcd, kube-apiserver, controller-manager, scheduler, KWOK) in
a temporary state directory (never the shared ``.cluster/``), creates the KWOK GPU nodes
(40 % 8xH100, 30 % 8xA100-80GB, 30 % 4xL4, GFD labels, GPU taint), installs the CRD and RBAC,
and runs ``glm-operator run`` as a subprocess under the chart's ServiceAccount, serving
``bench-*`` with its metrics on 127.0.0.1. A warm-up of a few GLMDeployments (then deleted) loads
the catalog, imports and connection pools; then one measured run creates all GLMDeployments as
fast as the apiserver takes them (several client threads), while watch streams (child
Deployments, GLMDeployments, nodes) timestamp, per GLMDeployment, the first child Deployment and
the first ``Planned=True`` condition. A sampler reads the operator's VmRSS / VmHWM / CPU time from
/proc during the run; the operator's /metrics (reconcile counts and durations) and the
apiserver's /metrics (request latency by verb and resource) are scraped before and after; a probe
times an apiserver GET every 0.5 s; CPU of every control-plane process is read from /proc.

After the burst, in the same run: every GLMDeployment is touched (an annotation, no new
generation) to count the operator's API requests per no-op reconcile (its own
``glm_operator_api_requests_total``; watches not counted); then the *baseline*: the same child
Deployments and Services, copied without owner into ``base-*`` namespaces, are created directly
by 8 client threads, timed the same way (create sent -> Deployment ADDED on a watch), and the
operator/baseline ratios of p50 and p99 are printed; then the same burst of GLMDeployments
again into ``ideal*-*`` namespaces the operator does not serve, answered by an *ideal controller* (a
watch on them that POSTs the same children from 8, then 32 threads: no planning, status or queue; then
from 32 threads in the operator's order, Deployments first and Services held while they are on the
wire: the floor for any controller that answers a watch), timed
like the operator (create sent -> child Deployment ADDED) -- what the apiserver allows a controller
under this load, printed with the operator/ideal ratios; then an idle phase (default 10 min, nodes
renewing their Leases) reports the operator's CPU %, reconciles and requests.

Latency = wall clock from the moment the create request was sent (an upper bound: it includes
the create round trip) to the moment the watch event arrived in this process.

Caveat: on 2 cores KWOK cannot renew 1,000 node Leases on time; with the controller-manager's
default node-monitor grace (50 s) the node lifecycle controller then marks a few hundred healthy
nodes NotReady/unreachable mid-run, which makes every GLMDeployment re-plan and many pods
unschedulable. The script therefore runs the controller-manager with a 10-minute grace
(``--node-monitor-grace ''`` restores the default) and counts the node changes it still sees.

Prints figures, asserts nothing. One measured run only (runtime budget ~5 min): the machine it
was written on has 2 cores shared with other work and with the control plane itself, so read
the medians (p50) first and the tails as indicative.

Network: everything is on 127.0.0.1; fake pods get 10.x IPs and nothing here dials them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from tests.harness.cluster import LocalCluster, free_port
from tests.harness.operator import RunningOperator

from glm_operator.controller.config import OperatorConfig

GROUP, VERSION, PLURAL = "inference.glm.dev", "v1alpha1", "glmdeployments"
MANAGED = "app.kubernetes.io/managed-by=glm-operator"
OWNER_LABEL = "inference.glm.dev/deployment"
TOTAL_BUDGET = 290.0  # seconds for the measured burst, from the nodes settled (baseline, idle on top)

GPU_KINDS: dict[str, dict[str, Any]] = {
    "h100": {
        "product": "NVIDIA-H100-80GB-HBM3",
        "count": 8,
        "memory": "81559",
        "family": "hopper",
        "cc": ("9", "0"),
        "cpu": "96",
        "mem": "1Ti",
        "extra": {},
    },
    "a100": {
        "product": "NVIDIA-A100-SXM4-80GB",
        "count": 8,
        "memory": "81920",
        "family": "ampere",
        "cc": ("8", "0"),
        "cpu": "96",
        "mem": "1Ti",
        "extra": {},
    },
    "l4": {
        "product": "NVIDIA-L4",
        "count": 4,
        "memory": "23034",
        "family": "ada-lovelace",
        "cc": ("8", "9"),
        "cpu": "48",
        "mem": "192Gi",
        "extra": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
    },
}

# Small models that fit one node; replicas 1-2; some pinned to a GPU type so all pools get used.
SPECS: list[dict[str, Any]] = [
    {"model": {"id": "zai-org/glm-4-9b-chat"}, "contextLength": 8192, "gpu": {"products": ["NVIDIA-L4"]}},
    {
        "model": {"id": "zai-org/GLM-4.7-Flash"},
        "contextLength": 32768,
        "gpu": {"products": ["NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"]},
    },
    {"model": {"id": "zai-org/GLM-4.5-Air"}, "contextLength": 32768},
    {"model": {"id": "zai-org/glm-4-9b-chat"}, "contextLength": 8192},
    {"model": {"id": "zai-org/GLM-4.7-Flash"}, "contextLength": 32768},
]


# -- inputs ------------------------------------------------------------------------------------
def node_doc(kind: str, i: int) -> dict[str, Any]:
    g = GPU_KINDS[kind]
    name = f"{kind}-{i:04d}"
    res = {
        "cpu": g["cpu"],
        "memory": g["mem"],
        "ephemeral-storage": "3500Gi",  # the pods request it (model download cache)
        "pods": "110",
        "nvidia.com/gpu": str(g["count"]),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                "node-role.kubernetes.io/gpu": "",
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": g["product"],
                "nvidia.com/gpu.count": str(g["count"]),
                "nvidia.com/gpu.memory": g["memory"],
                "nvidia.com/gpu.family": g["family"],
                "nvidia.com/cuda.driver.major": "570",
                "nvidia.com/gpu.compute.major": g["cc"][0],
                "nvidia.com/gpu.compute.minor": g["cc"][1],
                **g["extra"],
            },
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {"allocatable": dict(res), "capacity": dict(res)},
    }


def node_docs(n: int) -> list[dict[str, Any]]:
    n_h100, n_a100 = n * 4 // 10, n * 3 // 10
    counts = {"h100": n_h100, "a100": n_a100, "l4": n - n_h100 - n_a100}
    return [node_doc(kind, i) for kind, c in counts.items() for i in range(c)]


def glmd_docs(n: int, namespaces: list[str], prefix: str = "g") -> list[dict[str, Any]]:
    docs = []
    for i in range(n):
        spec = json.loads(json.dumps(SPECS[i % len(SPECS)]))
        spec["replicas"] = 1 + (i // len(SPECS)) % 2
        docs.append(
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "GLMDeployment",
                "metadata": {"name": f"{prefix}-{i:03d}", "namespace": namespaces[i % len(namespaces)]},
                "spec": spec,
            }
        )
    return docs


# The ideal controller in the operator's order: Services go in a lane of this many clients and wait
# while Deployment writes are on the wire, at most this long.
COMPANION_LANE_THREADS = 4
COMPANION_HOLD_SECONDS = 30.0


# -- measurement helpers -----------------------------------------------------------------------
def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def slowest_by_tenth(sent: dict[str, float], seen: dict[str, float]) -> str:
    """The largest ``seen - sent`` in each tenth of the keys, in the order they were sent: where in
    a burst its tail is."""
    values = [seen[k] - sent[k] for k in sorted(sent, key=sent.__getitem__) if k in seen]
    n = len(values)
    tenths = [values[i * n // 10 : (i + 1) * n // 10] for i in range(10)]
    return " ".join(f"{max(t):.2f}" for t in tenths if t)


def planned(obj: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Planned" and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


class Sampler(threading.Thread):
    """VmRSS / VmHWM / CPU seconds of one pid every ``period`` seconds."""

    def __init__(self, pid: int, period: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.pid, self.period = pid, period
        self.samples: list[tuple[float, int, int, float]] = []  # (t, rss KiB, hwm KiB, cpu s)
        self.stop_event = threading.Event()
        self.tick = os.sysconf("SC_CLK_TCK")

    def read(self) -> tuple[float, int, int, float] | None:
        try:
            status = Path(f"/proc/{self.pid}/status").read_text()
            stat = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        rss = int(fields.get("VmRSS", "0 kB").split()[0])
        hwm = int(fields.get("VmHWM", "0 kB").split()[0])
        cpu = (int(stat[11]) + int(stat[12])) / self.tick  # utime + stime
        return time.monotonic(), rss, hwm, cpu

    def run(self) -> None:
        while not self.stop_event.wait(self.period):
            s = self.read()
            if s:
                self.samples.append(s)

    def between(self, t0: float, t1: float) -> list[tuple[float, int, int, float]]:
        return [s for s in self.samples if t0 <= s[0] <= t1]


def memory_breakdown(pid: int) -> str:
    """Where a process's RSS is (from /proc/PID/smaps), with its thread and socket counts: the
    brk heap, thread stacks (8 MiB anonymous mappings), glibc's thread arenas (64 MiB-aligned
    anonymous reservations), other anonymous memory (CPython's arenas, mmap'd buffers), files."""
    try:
        smaps = Path(f"/proc/{pid}/smaps").read_text().splitlines()
        threads = len(os.listdir(f"/proc/{pid}/task"))
        sockets = sum(1 for fd in os.scandir(f"/proc/{pid}/fd") if os.readlink(fd.path).startswith("socket:"))
    except OSError:
        return "(process gone)"
    kinds: dict[str, int] = {}
    kind, size = "", 0
    for line in smaps:
        head = line.split()
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            lo, hi = (int(x, 16) for x in head[0].split("-"))
            size, path = hi - lo, head[5] if len(head) > 5 else ""
            if path == "[heap]":
                kind = "heap"
            elif path.startswith("/"):
                kind = "files"
            elif path:
                kind = "other"
            elif size == 8 * 2**20:
                kind = "stacks"
            elif lo % (64 * 2**20) == 0 or (hi % (64 * 2**20) == 0 and size < 64 * 2**20):
                kind = "arenas"
            else:
                kind = "anon"
        elif head and head[0] == "Rss:":
            kinds[kind] = kinds.get(kind, 0) + int(head[1])
    parts = ", ".join(
        f"{k} {kinds.get(k, 0) / 1024:.0f}" for k in ("heap", "arenas", "anon", "stacks", "files")
    )
    return f"{threads} threads, {sockets} sockets; RSS MiB: {parts}"


class Watcher(threading.Thread):
    """Watch a collection from a resourceVersion; call ``on_event(type, obj, now)`` per event.

    ``list_fn`` is a kubernetes-client list function (``list_cluster_custom_object`` with
    group/version/plural args, or ``CoreV1Api.list_node``); objects are passed on as plain dicts.

    Like an informer's, each watch request lasts ``WATCH_SECONDS`` (client-go: 5-10 min). Up to run
    86 it lasted 5 s: each watch was re-opened once or twice in a burst, on an apiserver answering
    a GET in up to 0.5 s then, and the events meanwhile were stamped that much late. ``now`` is
    taken when the chunk carrying the event arrives, before its JSON is decoded (the kubernetes
    client's ``Watch`` decodes first, and copies its buffer per line). ``stop`` shuts the socket,
    so the thread ends at once."""

    WATCH_SECONDS = 300

    def __init__(
        self,
        list_fn: Callable[..., Any],
        args: tuple[Any, ...],
        on_event: Callable[[str, dict[str, Any], float], None],
        label_selector: str | None = None,
    ) -> None:
        super().__init__(daemon=True)
        self.list_fn, self.args, self.on_event = list_fn, args, on_event
        self.kw: dict[str, Any] = {"label_selector": label_selector} if label_selector else {}
        self.stop_event = threading.Event()
        self.connected = threading.Event()
        self.errors = 0
        self.reopened = 0  # watches the apiserver ended (WATCH_SECONDS) and that were opened again
        self._resp: Any = None
        self.rv = self.relist()

    def relist(self) -> str:
        resp = self.list_fn(*self.args, _preload_content=False, _request_timeout=60, **self.kw)
        listing = json.loads(resp.data)
        now = time.monotonic()
        for item in listing.get("items", []):
            self.on_event("ADDED", item, now)
        return str(listing["metadata"]["resourceVersion"])

    def stop(self) -> None:
        self.stop_event.set()
        resp = self._resp
        if resp is not None:
            with contextlib.suppress(Exception):
                resp.shutdown()

    def _events(self, resp: Any) -> Any:
        """(event, arrival time) per line of the watch stream."""
        pending = b""
        for chunk in resp.stream(amt=None, decode_content=False):
            now = time.monotonic()
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line.strip():
                    yield json.loads(line), now

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                resp = self.list_fn(
                    *self.args,
                    watch=True,
                    resource_version=self.rv,
                    timeout_seconds=self.WATCH_SECONDS,
                    allow_watch_bookmarks=True,
                    _preload_content=False,
                    _request_timeout=(10, self.WATCH_SECONDS + 60),
                    **self.kw,
                )
                self._resp = resp
                if self.stop_event.is_set():
                    break
                self.connected.set()
                for ev, now in self._events(resp):
                    if self.stop_event.is_set():
                        return
                    obj = ev["object"]
                    if ev["type"] == "ERROR":
                        raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message')}")
                    rv = (obj.get("metadata") or {}).get("resourceVersion")
                    if rv:
                        self.rv = rv
                    if ev["type"] != "BOOKMARK":
                        self.on_event(ev["type"], obj, now)
                self.reopened += 1
            except Exception:
                if self.stop_event.is_set():
                    break
                self.errors += 1
                if self.stop_event.wait(0.5):
                    break
                # Resume from a fresh list if the resourceVersion expired (410) or anything else.
                with contextlib.suppress(Exception):
                    self.rv = self.relist()


def scrape(port: int, only: str | None = None) -> dict[str, float]:
    """The operator's /metrics on loopback, as {series: value} (no parsing of exemplars etc.);
    ``only``: one sample name (prometheus_client's ``name[]`` filter renders nothing else)."""
    out: dict[str, float] = {}
    query = f"?name[]={only}" if only else ""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics{query}", timeout=5) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith("#") or not line.strip():
                continue
            key, _, value = line.rpartition(" ")
            with contextlib.suppress(ValueError):
                out[key] = float(value)
    return out


APISERVER_RESOURCES = ("glmdeployments", "deployments", "pods", "services", "events", "replicasets", "leases")


IDEAL_REQUESTS = (("POST", "glmdeployments"), ("POST", "deployments"), ("POST", "services"))
IDEAL_APPLIES = (("POST", "glmdeployments"), ("APPLY", "deployments"), ("APPLY", "services"))


def request_means(
    before: dict[tuple[str, str, str], tuple[float, float]],
    after: dict[tuple[str, str, str], tuple[float, float]],
    requests: tuple[tuple[str, str], ...],
) -> str:
    """Server-side mean latency of some (verb, resource) requests between two apiserver scrapes."""
    parts = []
    for verb, resource in requests:
        tot, cnt = after.get((verb, resource, ""), (0.0, 0.0))
        b_tot, b_cnt = before.get((verb, resource, ""), (0.0, 0.0))
        if cnt > b_cnt:
            parts.append(
                f"{verb} {resource} {cnt - b_cnt:.0f} x mean {(tot - b_tot) / (cnt - b_cnt) * 1000:.0f} ms"
            )
    return ", ".join(parts) or "none"


def apiserver_get(local: LocalCluster, path: str, timeout: float) -> Any:
    """GET ``path`` from kube-apiserver on loopback as the cluster's admin (an open response)."""
    ctx = ssl.create_default_context(cafile=str(local.state_dir / "certs" / "apiserver.crt"))
    ctx.check_hostname = False
    req = urllib.request.Request(
        f"{local.server_url()}{path}", headers={"Authorization": f"Bearer {local.token()}"}
    )
    return urllib.request.urlopen(req, timeout=timeout, context=ctx)


def scrape_apiserver(local: LocalCluster) -> dict[tuple[str, str, str], tuple[float, float]]:
    """kube-apiserver request latency on loopback: {(verb, resource, subresource): (sum s, count)}."""
    out: dict[tuple[str, str, str], list[float]] = {}
    with apiserver_get(local, "/metrics", timeout=10) as resp:
        for line in resp.read().decode().splitlines():
            wait = re.match(
                r"apiserver_flowcontrol_request_wait_duration_seconds_(sum|count)\{(.*)\} (\S+)$", line
            )
            if wait:  # time requests queued in API Priority and Fairness, per priority level
                labels = dict(re.findall(r'(\w+)="([^"]*)"', wait.group(2)))
                key = ("APF-WAIT", labels.get("priority_level", ""), labels.get("flow_schema", ""))
                acc = out.setdefault(key, [0.0, 0.0])
                acc[0 if wait.group(1) == "sum" else 1] += float(wait.group(3))
                continue
            if not line.startswith("apiserver_request_duration_seconds_"):
                continue
            m = re.match(r"apiserver_request_duration_seconds_(sum|count)\{(.*)\} (\S+)$", line)
            if not m:
                continue
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            if labels.get("resource") not in APISERVER_RESOURCES:
                continue
            key = (labels.get("verb", ""), labels["resource"], labels.get("subresource", ""))
            acc = out.setdefault(key, [0.0, 0.0])
            acc[0 if m.group(1) == "sum" else 1] += float(m.group(3))
    return {k: (v[0], v[1]) for k, v in out.items()}


def cpu_seconds(pid: int) -> float:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")


def histogram_quantile(
    before: dict[str, float], after: dict[str, float], name: str, q: float, labels: str = ""
) -> float:
    """Prometheus-style quantile of a histogram over the (after - before) window; ``labels``: the
    series' other labels, e.g. 'result="ok",' (prometheus_client sorts them, ``le`` included)."""
    wanted = dict(re.findall(r'(\w+)="([^"]*)"', labels))
    buckets = []
    for key, value in after.items():
        if not key.startswith(name + "_bucket{"):
            continue
        series = dict(re.findall(r'(\w+)="([^"]*)"', key[len(name) + 8 :]))
        le = series.pop("le", None)
        if le is not None and series == wanted:
            buckets.append((float(le), value - before.get(key, 0.0)))
    buckets.sort()
    if not buckets or buckets[-1][1] <= 0:
        return float("nan")
    rank = q * buckets[-1][1]
    prev_le, prev_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if le == float("inf"):
                return prev_le
            return prev_le + (le - prev_le) * ((rank - prev_count) / max(count - prev_count, 1e-9))
        prev_le, prev_count = le, count
    return prev_le


def wait_until(pred: Callable[[], bool], timeout: float, period: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(period)
    return pred()


# -- the benchmark -----------------------------------------------------------------------------
def create_all(
    kubeconfig: Path, docs: list[dict[str, Any]], threads: int, schedule: dict[str, float] | None = None
) -> tuple[dict[str, float], float]:
    """Create GLMDeployments from ``threads`` clients; returns {ns/name: send time}, total seconds.
    ``schedule`` ({name: seconds after the start}) holds each create back until its time (to replay
    the arrival times of an earlier burst)."""
    sent: dict[str, float] = {}
    local = threading.local()
    t0 = time.monotonic()

    def one(doc: dict[str, Any]) -> None:
        api = getattr(local, "api", None)
        if api is None:
            api = local.api = k8s.CustomObjectsApi(k8s_config.new_client_from_config(str(kubeconfig)))
        key = f"{doc['metadata']['namespace']}/{doc['metadata']['name']}"
        if schedule is not None:
            time.sleep(max(0.0, t0 + schedule.get(doc["metadata"]["name"], 0.0) - time.monotonic()))
        for attempt in range(5):
            sent[key] = time.monotonic()
            try:
                api.create_namespaced_custom_object(
                    GROUP, VERSION, doc["metadata"]["namespace"], PLURAL, doc, _request_timeout=30
                )
                return
            except k8s.ApiException as exc:
                if exc.status == 409:  # created by an earlier attempt whose response was lost
                    return
                if attempt == 4:
                    raise
                time.sleep(0.2)

    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(one, docs))
    return sent, time.monotonic() - t0


def apply_nodes(local: LocalCluster, work: Path, n: int, chunks: int = 4) -> float:
    docs = node_docs(n)
    t0 = time.monotonic()
    procs = []
    env = {**os.environ, "KUBECONFIG": str(local.kubeconfig)}
    for c in range(chunks):
        part = docs[c::chunks]
        path = work / f"nodes-{c}.yaml"
        path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": part}))
        procs.append(
            subprocess.Popen(
                [
                    str(local.bin_dir / "kubectl"),
                    "apply",
                    "--server-side",
                    "--force-conflicts",
                    "-f",
                    str(path),
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        )
    for p in procs:
        try:
            _, err = p.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            raise RuntimeError("kubectl apply of nodes timed out") from None
        if p.returncode != 0:
            raise RuntimeError(f"kubectl apply of nodes failed: {err.decode()[-2000:]}")
    # Poll one list instead of `kubectl wait`, which checks 1,000 nodes one after another.
    core = k8s.CoreV1Api(k8s_config.new_client_from_config(str(local.kubeconfig)))

    def ready_count() -> int:
        nodes = core.list_node(label_selector="type=kwok", _request_timeout=30).items
        ready = [
            nd
            for nd in nodes
            for c in ((nd.status.conditions if nd.status else None) or [])
            if c.type == "Ready" and c.status == "True"
        ]
        return len(ready)

    if not wait_until(lambda: ready_count() >= n, 150, period=1.0):
        raise RuntimeError(f"only {ready_count()}/{n} nodes Ready after 150 s")

    # The controller-manager then initialises every node (beta.kubernetes.io/arch and /os labels,
    # as a kubelet would at registration, and the node lifecycle controller's not-ready taints):
    # about 4-5 nodes a second here (its client's QPS limit), so ~220 s for 1,000 nodes, which a
    # real cluster's nodes have long finished. Until then the controller-manager writes every node
    # and competes with the measured burst, while the baseline and the ideal controller, measured
    # later, run on a settled cluster (runs 40-52 started the burst with ~290 nodes to go, a
    # confound of the operator/baseline ratio). So the burst starts once every node is labelled
    # and untainted.
    def unsettled() -> int:
        nodes = core.list_node(label_selector="type=kwok", _request_timeout=30).items
        return sum(
            1
            for nd in nodes
            if "beta.kubernetes.io/os" not in (nd.metadata.labels or {})
            or any(t.key.startswith("node.kubernetes.io/") for t in (nd.spec.taints or []))
        )

    if not wait_until(lambda: unsettled() == 0, 420, period=2.0):
        print(f"  warning: {unsettled()}/{n} nodes not yet labelled or still tainted after 420 s")
    return time.monotonic() - t0


# -- same-run baseline, no-op reconciles, idle phase ---------------------------------------------
BASELINE_LABEL = "bench-baseline"


def baseline_copies(kubeconfig: Path, namespaces: list[str]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The operator's child (Deployment, Service) pairs, as plain objects to create elsewhere:
    same specs, no owner, not labelled as ours (the operator ignores them)."""
    api = k8s.ApiClient(k8s_config.new_client_from_config(str(kubeconfig)).configuration)
    custom = k8s.CustomObjectsApi(api)
    core = k8s.CoreV1Api(api)
    services = {
        (s.metadata.namespace, s.metadata.name): api.sanitize_for_serialization(s)
        for ns in namespaces
        for s in core.list_namespaced_service(ns, label_selector=MANAGED, _request_timeout=60).items
    }
    pairs = []
    for ns in namespaces:
        deps = custom.list_namespaced_custom_object("apps", "v1", ns, "deployments", label_selector=MANAGED)
        for dep in deps["items"]:
            owner = dep["metadata"]["labels"].get(OWNER_LABEL, "")
            svc = services.get((ns, owner))
            if svc is None:
                continue
            pairs.append((_plain_copy(dep, "apps/v1", "Deployment"), _plain_copy(svc, "v1", "Service")))
    return pairs


def _plain_copy(obj: dict[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    labels = {k: v for k, v in (obj["metadata"].get("labels") or {}).items() if "managed-by" not in k}
    labels[BASELINE_LABEL] = "1"
    spec = json.loads(json.dumps(obj["spec"]))
    for field in ("clusterIP", "clusterIPs"):
        spec.pop(field, None)
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": obj["metadata"]["name"], "labels": labels},
        "spec": spec,
    }


IDEAL_SSA: dict[str, Any] = {"field_manager": "ideal-controller", "force": True, "_request_timeout": 30}


class PairWriter:
    """Writes (Deployment, Service) pairs from several threads, one API client per thread: POST, or
    server-side apply (``apply``, forced, its own field manager) as the operator does."""

    def __init__(self, kubeconfig: Path, apply: bool = False) -> None:
        self.kubeconfig, self.apply = kubeconfig, apply
        self.local = threading.local()

    def clients(self) -> tuple[k8s.AppsV1Api, k8s.CoreV1Api]:
        """This thread's clients, made on first use (``new_client_from_config`` reads the
        kubeconfig, writes its certificates to files and builds an SSL context: tens of ms,
        more with several threads at it). Call it before a timed request."""
        if getattr(self.local, "apps", None) is None:
            client = k8s_config.new_client_from_config(str(self.kubeconfig))
            self.local.apps, self.local.core = k8s.AppsV1Api(client), k8s.CoreV1Api(client)
        return self.local.apps, self.local.core

    def write(self, namespace: str, dep: dict[str, Any], svc: dict[str, Any]) -> None:
        self.deployment(namespace, dep)
        self.service(namespace, svc)

    def deployment(self, namespace: str, dep: dict[str, Any]) -> None:
        apps, _ = self.clients()
        self._send(apps.patch_namespaced_deployment, apps.create_namespaced_deployment, namespace, dep)

    def service(self, namespace: str, svc: dict[str, Any]) -> None:
        _, core = self.clients()
        self._send(core.patch_namespaced_service, core.create_namespaced_service, namespace, svc)

    def _send(
        self, patch: Callable[..., Any], create: Callable[..., Any], namespace: str, obj: dict[str, Any]
    ) -> None:
        """Server-side apply (``apply``) or POST one object."""
        if self.apply:
            ssa = {**IDEAL_SSA, "_content_type": "application/apply-patch+yaml"}
            patch(obj["metadata"]["name"], namespace, obj, **ssa)
        else:
            create(namespace, obj, _request_timeout=30)


def create_baseline(
    kubeconfig: Path, pairs: list[tuple[dict[str, Any], dict[str, Any]]], namespaces: list[str], threads: int
) -> tuple[dict[str, float], float]:
    """Create each (Deployment, Service) pair directly from ``threads`` clients, as the operator
    would (one pair after the other per client); {namespace/deployment: send time}, total s."""
    sent: dict[str, float] = {}
    writer = PairWriter(kubeconfig)

    def one(item: tuple[int, tuple[dict[str, Any], dict[str, Any]]]) -> None:
        i, (dep, svc) = item
        ns = namespaces[i % len(namespaces)]
        writer.clients()  # made before the clock starts, as create_all's (up to run 91 they were not)
        sent[f"{ns}/{dep['metadata']['name']}"] = time.monotonic()
        writer.write(ns, dep, svc)

    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(one, enumerate(pairs)))
    return sent, time.monotonic() - t0


IDEAL_LABEL = "bench-ideal"


class IdealController:
    """What the apiserver allows an event-driven controller under the same burst: a watch on
    GLMDeployments labelled ``bench-ideal`` (in ``ideal*-*`` namespaces, which the operator does not
    serve); on ADDED, ``threads`` clients create that GLMDeployment's children (the operator's own
    Deployment + Service, copied) with POST, or with server-side apply like the operator
    (``apply``): no planning, no rendering, no status, no queue.

    ``workloads_first``: the operator's order instead of one pair after the other. A client
    POSTs the Deployment only; the Services go in a lane of COMPANION_LANE_THREADS clients and
    wait while Deployment writes are on the wire (at most COMPANION_HOLD_SECONDS), as the
    operator's companions do. The floor for any controller that answers a watch."""

    def __init__(
        self,
        kubeconfig: Path,
        pairs: dict[str, tuple[dict[str, Any], dict[str, Any]]],
        threads: int,
        apply: bool = False,
        workloads_first: bool = False,
    ):
        self.pairs, self.writer = pairs, PairWriter(kubeconfig, apply)
        self.threads = threads
        self.pool = ThreadPoolExecutor(max_workers=threads)
        self.workloads_first = workloads_first
        self.companions = ThreadPoolExecutor(max_workers=COMPANION_LANE_THREADS)
        self.in_flight = 0  # Deployment writes on the wire (workloads_first)
        self.idle = threading.Condition()
        self.seen: dict[str, float] = {}  # ns/name -> GLMDeployment ADDED seen by this controller
        self.errors = 0

    def warm(self) -> None:
        """Start every thread and make its clients before the burst, as the operator's are (up to
        run 91 each thread made them on its first create, inside the timed path)."""
        for pool, n in ((self.pool, self.threads), (self.companions, COMPANION_LANE_THREADS)):
            barrier = threading.Barrier(n)

            def ready(barrier: threading.Barrier = barrier) -> None:
                self.writer.clients()
                barrier.wait(60)  # every task on a thread of its own

            for future in [pool.submit(ready) for _ in range(n)]:
                future.result()

    def shutdown(self) -> None:
        for pool in (self.pool, self.companions):
            pool.shutdown(wait=False, cancel_futures=True)

    def on_glmd(self, type_: str, obj: dict[str, Any], now: float) -> None:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if type_ == "ADDED" and key not in self.seen:
            self.seen[key] = now
            self.pool.submit(self.create, str(meta["namespace"]), str(meta["name"]))

    def create(self, namespace: str, name: str) -> None:
        dep, svc = self.pairs[name]
        if not self.workloads_first:
            try:
                self.writer.write(namespace, dep, svc)
            except k8s.ApiException:
                self.errors += 1
            return
        with self.idle:
            self.in_flight += 1
        try:
            self.writer.deployment(namespace, dep)
        except k8s.ApiException:
            self.errors += 1
        finally:
            with self.idle:
                self.in_flight -= 1
                self.idle.notify_all()
        self.companions.submit(self.create_service, namespace, svc)

    def create_service(self, namespace: str, svc: dict[str, Any]) -> None:
        with self.idle:
            self.idle.wait_for(lambda: self.in_flight == 0, timeout=COMPANION_HOLD_SECONDS)
        try:
            self.writer.service(namespace, svc)
        except k8s.ApiException:
            self.errors += 1


def ideal_pairs(
    pairs: list[tuple[dict[str, Any], dict[str, Any]]], label_value: str
) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """The baseline's (Deployment, Service) copies by owning GLMDeployment name, relabelled."""
    out: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for dep, svc in pairs:
        owner = dep["metadata"]["labels"].get(OWNER_LABEL)
        if not owner or owner in out:
            continue
        copies = []
        for obj in (dep, svc):
            obj = json.loads(json.dumps(obj))
            labels = obj["metadata"]["labels"]
            labels.pop(BASELINE_LABEL, None)
            labels[IDEAL_LABEL] = label_value
            copies.append(obj)
        out[owner] = (copies[0], copies[1])
    return out


def create_namespaces(local: LocalCluster, names: list[str]) -> None:
    items = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in names]
    local.kubectl(
        "apply", "-f", "-", input=yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items})
    )


def ideal_tag(threads: int, workloads_first: bool) -> str:
    """Names one ideal burst: its label value and namespace prefix (``ideal<tag>-*``)."""
    return f"w{threads}" if workloads_first else str(threads)


def run_ideal_controller(
    local: LocalCluster,
    custom: k8s.CustomObjectsApi,
    pairs: list[tuple[dict[str, Any], dict[str, Any]]],
    glmds: int,
    namespaces: int,
    threads: int,
    create_threads: int,
    schedule: dict[str, float],
    apply: bool = False,
    workloads_first: bool = False,
) -> tuple[list[float], list[float], float, int]:
    """The measured burst again, into ``ideal<threads>-*`` namespaces, each create sent at the same
    offset as in the operator's burst (``schedule``, by name), answered by an ``IdealController``
    with ``threads`` client threads. Returns the latencies create sent ->
    child Deployment ADDED and -> GLMDeployment seen by the controller, the create time and the
    controller's create errors."""
    tag = ideal_tag(threads, workloads_first)
    label = f"{IDEAL_LABEL}={tag}"
    ns_names = [f"ideal{tag}-{i}" for i in range(namespaces)]
    create_namespaces(local, ns_names)
    ideal = IdealController(local.kubeconfig, ideal_pairs(pairs, tag), threads, apply, workloads_first)
    ideal.warm()
    docs = [d for d in glmd_docs(glmds, ns_names) if d["metadata"]["name"] in ideal.pairs]
    for d in docs:
        d["metadata"]["labels"] = {IDEAL_LABEL: tag}
    lock = threading.Lock()
    child: dict[str, float] = {}

    def on_child(type_: str, obj: dict[str, Any], now: float) -> None:
        meta = obj.get("metadata") or {}
        owner = (meta.get("labels") or {}).get(OWNER_LABEL)
        if type_ == "ADDED" and owner:
            with lock:
                child.setdefault(f"{meta['namespace']}/{owner}", now)

    watches = [
        Watcher(custom.list_cluster_custom_object, ("apps", "v1", "deployments"), on_child, label),
        Watcher(custom.list_cluster_custom_object, (GROUP, VERSION, PLURAL), ideal.on_glmd, label),
    ]
    try:
        for w in watches:
            w.start()
        for w in watches:
            w.connected.wait(10)
        time.sleep(1.0)
        sent, seconds = create_all(local.kubeconfig, docs, threads=create_threads, schedule=schedule)
        wait_until(lambda: len(child) >= len(docs), 90, period=0.2)
    finally:
        for w in watches:
            w.stop()
        ideal.shutdown()
    with lock:
        lat = [child[k] - sent[k] for k in sent if k in child]
        seen = [ideal.seen[k] - sent[k] for k in sent if k in ideal.seen]
    return lat, seen, seconds, ideal.errors


def wait_pods_settled(core: k8s.CoreV1Api, timeout: float = 90.0) -> bool:
    """Wait until the pods of the previous phase stop starting: no pod outside Running, or the
    same number of them (unschedulable ones) in three polls 2 s apart. False on timeout."""
    deadline = time.monotonic() + timeout
    history: list[int] = []
    while time.monotonic() < deadline:
        pending = core.list_pod_for_all_namespaces(
            field_selector="status.phase!=Running", _preload_content=False, _request_timeout=60
        )
        history.append(len(json.loads(pending.data).get("items", [])))
        if history[-1] == 0 or (len(history) >= 3 and len(set(history[-3:])) == 1):
            return True
        time.sleep(2.0)
    return False


def free_gpus(local: LocalCluster, core: k8s.CoreV1Api, namespaces: list[str], kinds: str) -> float:
    """Delete ``kinds`` (e.g. "glmdeployments") in ``namespaces`` and wait until their pods are gone,
    so the next phase's pods schedule and run as the operator's did (with the GPUs taken, they
    would stay Pending and the cluster would do less work in that phase). Seconds it took."""
    t0 = time.monotonic()
    for ns in namespaces:
        local.kubectl("delete", kinds, "--all", "-n", ns, "--wait=false", check=False, timeout=60)
    wanted = set(namespaces)

    def pods_left() -> int:
        pods = core.list_pod_for_all_namespaces(_preload_content=False, _request_timeout=60)
        items = json.loads(pods.data).get("items", [])
        return sum(1 for p in items if p["metadata"]["namespace"] in wanted)

    if not wait_until(lambda: pods_left() == 0, 180, period=1.0):
        print(f"  warning: {pods_left()} pods still in {namespaces[0]}.. after 180 s", flush=True)
    return time.monotonic() - t0


def operator_requests(metrics: dict[str, float]) -> float:
    return sum(v for k, v in metrics.items() if k.startswith("glm_operator_api_requests_total{"))


def counter_by_label(
    before: dict[str, float],
    after: dict[str, float],
    series: str = "glm_operator_enqueued_total",
    label: str = "cause",
) -> str:
    """A counter with one label (by default ``glm_operator_enqueued_total`` by cause) between two
    scrapes, per label value."""
    causes: dict[str, float] = {}
    for k, v in after.items():
        m = re.match(series + r"\{" + label + r'="([^"]+)"\}', k)
        if m:
            causes[m.group(1)] = v - before.get(k, 0.0)
    return ", ".join(f"{c} {n:.0f}" for c, n in sorted(causes.items(), key=lambda kv: -kv[1])) or "none"


def reconciles_total(metrics: dict[str, float]) -> float:
    return sum(v for k, v in metrics.items() if k.startswith("glm_operator_reconciles_total{"))


def start_profiler(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling ``pid`` (100 Hz, without pausing it) into ``out`` as folded stacks; only
    threads holding the GIL are sampled (``--gil``): a thread waiting for the GIL (a planning
    thread after a hash or a socket call) would otherwise count as busy where it is not."""
    py_spy = Path(sys.executable).with_name("py-spy")
    return subprocess.Popen(
        [str(py_spy), "record", "--pid", str(pid), "--format", "raw", "--rate", "100", "--nonblocking",
         "--gil", "--output", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip


def stop_profiler(proc: subprocess.Popen[bytes], out: Path) -> None:
    proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
    print(f"  operator profile (py-spy, folded stacks): {out}", flush=True)


def start_apiserver_profile(local: LocalCluster, seconds: int, out: Path) -> threading.Thread:
    """kube-apiserver's own CPU profile (``/debug/pprof/profile``, needs ``--profiling=true``) over
    the first ``seconds`` of the burst, written to ``out`` (read with ``go tool pprof``)."""

    def fetch() -> None:
        try:
            with apiserver_get(local, f"/debug/pprof/profile?seconds={seconds}", seconds + 30) as resp:
                out.write_bytes(resp.read())
        except OSError as exc:
            print(f"  kube-apiserver profile failed: {exc}", flush=True)

    thread = threading.Thread(target=fetch, daemon=True)
    thread.start()
    return thread


def print_apiserver_profile(local: LocalCluster, out: Path, lines: int = 30) -> None:
    """The profile's top functions by cumulative CPU (``go tool pprof -top -cum``), when Go is here."""
    if not out.exists():
        return
    print(f"  kube-apiserver CPU profile (pprof): {out}", flush=True)
    try:
        top = subprocess.run(
            ["go", "tool", "pprof", "-top", "-cum", f"-nodecount={lines}",
             str(local.bin_dir / "kube-apiserver"), str(out)],
            capture_output=True, text=True, timeout=120, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"    (go tool pprof unavailable: {exc})", flush=True)
        return
    for line in top.splitlines():
        print(f"    {line}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--glmds", type=int, default=200)
    ap.add_argument("--namespaces", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=5, help="GLMDeployments in the (deleted) warm-up")
    ap.add_argument("--create-threads", type=int, default=8)
    ap.add_argument("--workers", type=int, default=OperatorConfig.workers, help="operator --workers")
    ap.add_argument(
        "--resync-seconds",
        type=float,
        default=OperatorConfig.resync_seconds,
        help="operator --resync-seconds",
    )
    ap.add_argument(
        "--node-monitor-grace",
        default="10m",
        help="kube-controller-manager --node-monitor-grace-period: KWOK on 2 shared cores cannot "
        "renew 1,000 node Leases on time, and with the default (50 s) the node lifecycle controller "
        "marks hundreds of healthy nodes NotReady mid-run, which no real cluster does ('' = default)",
    )
    ap.add_argument(
        "--ideal-threads",
        type=lambda v: [int(x) for x in v.split(",") if x],
        default=[8, OperatorConfig.workers],
        help="client threads of the ideal controller, one burst each (comma-separated; '' = skip)",
    )
    ap.add_argument(
        "--ideal-workloads-first-threads",
        type=lambda v: [int(x) for x in v.split(",") if x],
        default=[OperatorConfig.workers],
        help="client threads of the ideal controller in the operator's order (Deployments first, "
        "Services held while they are on the wire), one burst each after the others ('' = skip)",
    )
    ap.add_argument(
        "--ideal-apply",
        action="store_true",
        help="the ideal controller uses server-side apply (as the operator does) instead of POST",
    )
    ap.add_argument("--planned-timeout", type=float, default=150.0)
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (logs) after the run")
    ap.add_argument(
        "--apiserver-arg",
        action="append",
        default=[],
        help="extra kube-apiserver flag, repeatable (e.g. --apiserver-arg=--profiling=true for pprof)",
    )
    ap.add_argument(
        "--idle-seconds",
        type=float,
        default=600.0,
        help="idle phase after the run (0: skip); CPU %% and re-plans",
    )
    ap.add_argument(
        "--profile-operator",
        type=Path,
        metavar="FILE",
        help="sample the operator with py-spy (install it into the venv; not a project dependency) "
        "from the burst to the end of the settle, and write the folded stacks to FILE "
        "(flamegraph.pl / speedscope read them)",
    )
    ap.add_argument(
        "--profile-apiserver",
        type=Path,
        metavar="FILE",
        help="profile kube-apiserver's CPU (pprof, --profiling=true) over the first "
        "--profile-apiserver-seconds of the burst into FILE, and print its top functions",
    )
    ap.add_argument("--profile-apiserver-seconds", type=int, default=20)
    args = ap.parse_args()
    if args.profile_apiserver:
        args.apiserver_arg.append("--profiling=true")

    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="glm-controller-bench-"))
    kcm = [f"--node-monitor-grace-period={args.node_monitor_grace}"] if args.node_monitor_grace else []
    extra = {"kube-controller-manager": kcm, "kube-apiserver": args.apiserver_arg}
    local = LocalCluster(state_dir=tmp / "cluster", extra_args=extra)
    op = RunningOperator(local, tmp, namespaces="bench-*", resync_seconds=args.resync_seconds)
    watchers: list[Watcher] = []
    sampler: Sampler | None = None
    profiler: subprocess.Popen[bytes] | None = None
    print(f"controller_bench: temp dir {tmp}", flush=True)
    try:
        t = time.monotonic()
        local.up()
        print(f"  control plane up in {time.monotonic() - t:.1f} s", flush=True)
        t_nodes = apply_nodes(local, tmp, args.nodes)
        print(f"  {args.nodes} KWOK nodes created, Ready, labelled, untainted in {t_nodes:.1f} s", flush=True)
        budget_start = time.monotonic()  # TOTAL_BUDGET counts from here, not from the node set-up

        op.install()
        namespaces = [f"bench-{i}" for i in range(args.namespaces)]
        create_namespaces(local, [*namespaces, "bench-warmup"])

        metrics_port = free_port()
        t = time.monotonic()
        op.start(
            "--metrics-port", str(metrics_port), "--metrics-host", "127.0.0.1", "--workers", str(args.workers)
        )
        assert op.proc is not None
        sampler = Sampler(op.proc.pid)
        sampler.start()

        def operator_ready() -> bool:
            if op.proc is None or op.proc.poll() is not None:
                raise RuntimeError(f"operator exited; log tail:\n{op.log_tail()}")
            if "became leader" not in op.log_tail(200_000):
                return False
            try:
                scrape(metrics_port)
            except OSError:
                return False
            return True

        if not wait_until(operator_ready, 60):
            raise RuntimeError(f"operator not leader / metrics not served after 60 s:\n{op.log_tail()}")
        print(f"  operator leader and serving metrics {time.monotonic() - t:.1f} s after start", flush=True)

        k8s_config.load_kube_config(config_file=str(local.kubeconfig))
        custom = k8s.CustomObjectsApi()

        # -- warm-up: imports, catalog caches, HTTP pools; then gone, so the run starts clean --
        warm = glmd_docs(args.warmup, ["bench-warmup"], prefix="warm")
        create_all(local.kubeconfig, warm, threads=2)

        def warm_planned() -> bool:
            items = custom.list_namespaced_custom_object(GROUP, VERSION, "bench-warmup", PLURAL)["items"]
            return len(items) == len(warm) and all(planned(o) for o in items)

        t = time.monotonic()
        ok = wait_until(warm_planned, 60)
        print(
            f"  warm-up: {len(warm)} GLMDeployments {'Planned' if ok else 'NOT all Planned'} "
            f"in {time.monotonic() - t:.1f} s; deleting",
            flush=True,
        )
        local.kubectl("delete", "namespace", "bench-warmup", "--timeout=90s", check=False, timeout=100)
        time.sleep(3)  # let the operator drain the deletion events

        # -- the measured run ------------------------------------------------------------------
        lock = threading.Lock()
        first_child: dict[str, float] = {}
        children: set[str] = set()
        first_planned: dict[str, float] = {}
        glmd_seen: dict[str, float] = {}  # ADDED on the bench's own watch: create + watch delivery
        # key -> (time, Planned status/reason, phase) each time they change: the
        # story of the slowest ones is printed (why Planned=True came late)
        planned_story: dict[str, list[tuple[float, str, str]]] = {}
        first_ready: dict[str, float] = {}
        phases: dict[str, str] = {}
        status_writes: dict[str, int] = {}
        last_obj: dict[str, dict[str, Any]] = {}

        def on_child(type_: str, obj: dict[str, Any], now: float) -> None:
            meta = obj.get("metadata") or {}
            owner = (meta.get("labels") or {}).get(OWNER_LABEL)
            if type_ == "ADDED" and owner and meta.get("namespace") != "bench-warmup":
                with lock:
                    first_child.setdefault(f"{meta['namespace']}/{owner}", now)
                    children.add(f"{meta['namespace']}/{meta['name']}")

        def on_glmd(type_: str, obj: dict[str, Any], now: float) -> None:
            meta = obj.get("metadata") or {}
            if meta.get("namespace") == "bench-warmup" or type_ == "DELETED":
                return
            key = f"{meta['namespace']}/{meta['name']}"
            with lock:
                if type_ == "ADDED":
                    glmd_seen.setdefault(key, now)
                if type_ == "MODIFIED":
                    status_writes[key] = status_writes.get(key, 0) + 1
                if planned(obj):
                    first_planned.setdefault(key, now)
                cond = next(
                    (
                        c
                        for c in (obj.get("status") or {}).get("conditions") or []
                        if c.get("type") == "Planned"
                    ),
                    {},
                )
                step = (
                    f"{cond.get('status', '-')}/{cond.get('reason', '-')}",
                    str((obj.get("status") or {}).get("phase", "")),
                )
                story = planned_story.setdefault(key, [])
                if not story or story[-1][1:] != step:
                    story.append((now, *step))
                phase = (obj.get("status") or {}).get("phase", "")
                phases[key] = phase
                last_obj[key] = obj
                if phase == "Ready":
                    first_ready.setdefault(key, now)

        # Node health as the operator sees it: Ready flips and NoSchedule taints the node lifecycle
        # controller adds when KWOK's Lease renewals fall behind (each flip re-plans every key).
        node_state: dict[str, tuple[str, tuple[str, ...]]] = {}
        node_flips: list[float] = []

        def on_node(type_: str, obj: dict[str, Any], now: float) -> None:
            meta = obj.get("metadata") or {}
            name = str(meta.get("name", ""))
            ready = next(
                (
                    c.get("status", "")
                    for c in (obj.get("status") or {}).get("conditions") or []
                    if c.get("type") == "Ready"
                ),
                "",
            )
            taints = tuple(sorted(str(t.get("key")) for t in (obj.get("spec") or {}).get("taints") or []))
            with lock:
                prev = node_state.get(name)
                node_state[name] = (ready, taints)
                if type_ == "MODIFIED" and prev is not None and prev != (ready, taints):
                    node_flips.append(now)

        watchers = [
            Watcher(custom.list_cluster_custom_object, ("apps", "v1", "deployments"), on_child, MANAGED),
            Watcher(custom.list_cluster_custom_object, (GROUP, VERSION, PLURAL), on_glmd),
            Watcher(k8s.CoreV1Api().list_node, (), on_node, "type=kwok"),
        ]
        for w in watchers:
            w.start()
        for w in watchers:
            w.connected.wait(10)
        time.sleep(1.0)  # the watch requests are on the wire before the burst

        docs = glmd_docs(args.glmds, namespaces)
        keys = [f"{d['metadata']['namespace']}/{d['metadata']['name']}" for d in docs]
        # Client-side apiserver round trip during the burst (admin GET of one object, every 0.5 s).
        probe_lat: list[float] = []
        probe_stop = threading.Event()

        def probe() -> None:
            api = k8s.CoreV1Api(k8s_config.new_client_from_config(str(local.kubeconfig)))
            while not probe_stop.wait(0.5):
                t0 = time.monotonic()
                with contextlib.suppress(Exception):
                    api.read_namespace("bench-0", _request_timeout=10)
                    probe_lat.append(time.monotonic() - t0)

        component_pids = {**local._pids(), "glm-operator": op.proc.pid}
        cpu_before = {name: cpu_seconds(pid) for name, pid in component_pids.items()}
        api_before = scrape_apiserver(local)
        log_offset = op.log_path.stat().st_size if op.log_path.exists() else 0
        m_before = scrape(metrics_port)
        s_before = sampler.read()
        mem_before = memory_breakdown(op.proc.pid)
        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        profiler = start_profiler(op.proc.pid, args.profile_operator) if args.profile_operator else None
        api_profile = (
            start_apiserver_profile(local, args.profile_apiserver_seconds, args.profile_apiserver)
            if args.profile_apiserver
            else None
        )
        t_burst = time.monotonic()
        sent, create_seconds = create_all(local.kubeconfig, docs, threads=args.create_threads)
        print(
            f"  created {len(docs)} GLMDeployments in {create_seconds:.2f} s "
            f"({len(docs) / create_seconds:.0f}/s, {args.create_threads} client threads)",
            flush=True,
        )

        budget_left = TOTAL_BUDGET - (time.monotonic() - budget_start) - 30
        timeout = max(20.0, min(args.planned_timeout, budget_left))

        def all_planned() -> bool:
            with lock:
                return len(first_planned) >= len(keys)

        wait_until(all_planned, timeout, period=0.2)
        t_all_planned = time.monotonic()

        # Settle: until every GLMDeployment is Ready and the operator's reconcile counter stops
        # moving (pods scheduling and going Ready re-enqueue their owners), at most 60 s, so
        # "steady RSS" and the no-op phase come after the wave.
        def all_ready() -> bool:
            with lock:
                return len(first_ready) >= len(keys)

        last, still_since = -1.0, time.monotonic()
        settle_deadline = time.monotonic() + min(
            60.0, max(5.0, TOTAL_BUDGET - (time.monotonic() - budget_start) - 15)
        )
        while time.monotonic() < settle_deadline:
            with contextlib.suppress(OSError):
                now_total = reconciles_total(scrape(metrics_port, only="glm_operator_reconciles_total"))
                if now_total != last:
                    last, still_since = now_total, time.monotonic()
                elif time.monotonic() - still_since >= 5.0 and all_ready():
                    break
            # Only the one counter: the whole page renders every series in the operator (a
            # twentieth of its CPU in the burst at 0.5 Hz, bench run 72's profile), where
            # Prometheus scrapes every 15-30 s.
            time.sleep(2.0)
        t_settled = time.monotonic()
        if profiler is not None:
            stop_profiler(profiler, args.profile_operator)
        if api_profile is not None:
            api_profile.join(timeout=args.profile_apiserver_seconds + 30)
            print_apiserver_profile(local, args.profile_apiserver)
        time.sleep(1.0)
        m_after = scrape(metrics_port)
        s_after = sampler.read()
        probe_stop.set()
        cpu_after = {name: cpu_seconds(pid) for name, pid in component_pids.items()}
        api_after = scrape_apiserver(local)

        # -- figures ---------------------------------------------------------------------------
        with lock:
            lat_child = [first_child[k] - sent[k] for k in keys if k in first_child and k in sent]
            lat_planned = [first_planned[k] - sent[k] for k in keys if k in first_planned and k in sent]
            lat_ready = [first_ready[k] - sent[k] for k in keys if k in first_ready and k in sent]
            lat_seen = [glmd_seen[k] - sent[k] for k in keys if k in glmd_seen and k in sent]
            seen_to_child = [
                first_child[k] - glmd_seen[k] for k in keys if k in first_child and k in glmd_seen
            ]
            n_children = len(children)
            phase_counts: dict[str, int] = {}
            for k in keys:
                phase_counts[phases.get(k, "-") or "-"] = phase_counts.get(phases.get(k, "-") or "-", 0) + 1
            writes = [status_writes.get(k, 0) for k in keys]
            not_ready: dict[str, int] = {}
            examples: dict[str, str] = {}
            for k in keys:
                obj = last_obj.get(k) or {}
                if phases.get(k) == "Ready":
                    continue
                conds = {c.get("type"): c for c in (obj.get("status") or {}).get("conditions") or []}
                deg = conds.get("Degraded") or {}
                prog = conds.get("Progressing") or {}
                reason = deg.get("reason") if deg.get("status") == "True" else prog.get("reason", "?")
                model = (obj.get("spec") or {}).get("model", {}).get("id", "?").split("/")[-1]
                label = f"{phases.get(k) or '-'}/{reason} ({model})"
                not_ready[label] = not_ready.get(label, 0) + 1
                examples.setdefault(label, str(deg.get("message") or prog.get("message") or ""))

        def out(label: str, text: str) -> None:
            print(f"  {label:<38} {text}")

        def dist(values: list[float]) -> str:
            if not values:
                return "(none observed)"
            return (
                f"n={len(values):<4} p50={pct(values, 0.5):6.2f}  p90={pct(values, 0.9):6.2f}  "
                f"p99={pct(values, 0.99):6.2f}  max={max(values):6.2f}"
            )

        def mdiff(key: str) -> float:
            return m_after.get(key, 0.0) - m_before.get(key, 0.0)

        hname = "glm_operator_reconcile_duration_seconds"
        rec_ok = mdiff('glm_operator_reconciles_total{result="ok"}')
        rec_err = mdiff('glm_operator_reconciles_total{result="error"}')
        dur_sum, dur_cnt = mdiff(f"{hname}_sum"), mdiff(f"{hname}_count")
        window_s = max(t_settled - t_burst, 1e-9)
        hwm_max = max((s[2] for s in sampler.samples), default=0)
        rss_peak = max((s[1] for s in sampler.between(t_burst, t_settled)), default=0)
        rss_before = s_before[1] if s_before else 0
        cpu_op = (s_after[3] - s_before[3]) if s_after and s_before else float("nan")
        tail = [s[1] for s in sampler.samples if s[0] >= t_settled]
        steady_rss = statistics.median(tail) if tail else (s_after[1] if s_after else 0)
        log_text = ""
        with contextlib.suppress(OSError), open(op.log_path, "rb") as fh:
            fh.seek(log_offset)
            log_text = fh.read().decode(errors="replace")
        n_warn, n_err = log_text.count(" WARNING "), log_text.count(" ERROR ")
        with lock:
            flips = [t for t in node_flips if t >= t_burst]
            unhealthy = sum(1 for r, taints in node_state.values() if r != "True" or len(taints) > 1)
            n_nodes_seen = len(node_state)
        # Who posted the Events in the served namespaces (the operator's own vs. the control plane's).
        by_source: dict[str, int] = {}
        with contextlib.suppress(Exception):
            core = k8s.CoreV1Api()
            for ns_name in namespaces:
                for ev in core.list_namespaced_event(ns_name, _request_timeout=30).items:
                    src = ev.reporting_component or (ev.source.component if ev.source else "") or "?"
                    by_source[src] = by_source.get(src, 0) + 1
        cpu_use = {n: (cpu_after[n] - cpu_before[n]) / window_s * 100 for n in component_pids}
        api_rows = []
        for key, (tot, cnt) in api_after.items():
            b_tot, b_cnt = api_before.get(key, (0.0, 0.0))
            if cnt - b_cnt > 0 and key[0] not in ("WATCH", "APF-WAIT"):  # watches: long polls
                api_rows.append((tot - b_tot, cnt - b_cnt, key))
        api_rows.sort(reverse=True)
        apf_rows = sorted(
            (
                (tot - api_before.get(key, (0.0, 0.0))[0], cnt - api_before.get(key, (0.0, 0.0))[1], key)
                for key, (tot, cnt) in api_after.items()
                if key[0] == "APF-WAIT"
            ),
            reverse=True,
        )

        print()
        print("controller_bench: one measured run after a warm-up (2 shared cores: read p50 first)")
        out("nodes", f"{args.nodes} KWOK (40% 8xH100, 30% 8xA100-80GB, 30% 4xL4)")
        out(
            "GLMDeployments",
            f"{len(docs)} in {args.namespaces} namespaces (glm-4-9b-chat 8k, "
            "GLM-4.7-Flash 32k, GLM-4.5-Air 32k; replicas 1-2)",
        )
        out(
            "operator",
            f"--workers {args.workers}, resync {args.resync_seconds:.0f} s, leader election on; "
            f"node-monitor grace {args.node_monitor_grace or 'default'}",
        )
        out("create burst", f"{create_seconds:.2f} s for {len(docs)} objects")
        print("  latency from the create request (seconds):")
        out("apply -> first child Deployment", dist(lat_child))
        with lock:
            out("  max by tenth of the creates, in order", slowest_by_tenth(sent, first_child))
        out("  apply -> GLMDeployment seen (bench)", dist(lat_seen))
        out("  seen -> first child Deployment", dist(seen_to_child))
        out("apply -> Planned=True", dist(lat_planned))
        slowest = sorted((first_planned[k] - sent[k], k) for k in keys if k in first_planned and k in sent)[
            -3:
        ]
        for lat, k in reversed(slowest):
            steps = ", ".join(f"{t - sent[k]:.1f}s {c} {ph}" for t, c, ph in planned_story.get(k, [])[:8])
            print(f"    slow Planned {k} ({lat:.1f} s): {steps}")
        out("apply -> phase Ready (indicative)", dist(lat_ready))
        if len(lat_planned) >= len(keys):
            out(f"all {len(keys)} Planned", f"{t_all_planned - t_burst:6.2f} s after the first create")
        else:
            out(
                "all Planned",
                f"NOT reached: {len(lat_planned)}/{len(keys)} after {t_all_planned - t_burst:.0f} s",
            )
        out("child Deployments", f"{n_children} for {len(first_child)} GLMDeployments")
        out(
            "status writes seen per GLMDeployment",
            f"median {statistics.median(writes) if writes else 0:.0f}, max {max(writes, default=0)}",
        )
        out("settled (all Ready, reconciles flat 5 s)", f"{window_s:6.2f} s after the first create")
        out(
            "reconciles (burst window)",
            f"ok {rec_ok:.0f}, error {rec_err:.0f} "
            f"({(rec_ok + rec_err) / max(len(docs), 1):.1f} per GLMDeployment)",
        )
        if dur_cnt:
            p50 = histogram_quantile(m_before, m_after, hname, 0.5) * 1000
            p99 = histogram_quantile(m_before, m_after, hname, 0.99) * 1000
            out(
                "reconcile duration",
                f"mean {dur_sum / dur_cnt * 1000:.0f} ms, p50~{p50:.0f} ms, "
                f"p99~{p99:.0f} ms (from the histogram)",
            )
            busy = dur_sum / (args.workers * window_s) * 100
            out(
                "reconcile time / worker time",
                f"{dur_sum:.0f} s of reconciles in {window_s:.0f} s x {args.workers} workers = {busy:.0f}% "
                "(a worker is busy for its reconcile's whole time)",
            )
        waits = [
            histogram_quantile(m_before, m_after, "glm_operator_queue_wait_seconds", q) * 1000
            for q in (0.5, 0.99)
        ]
        out("queue wait", f"p50~{waits[0]:.0f} ms, p99~{waits[1]:.0f} ms (from the histogram)")
        out("operator CPU (burst+settle)", f"{cpu_op:.1f} s ({cpu_op / window_s * 100:.0f}% of one core)")
        out("operator RSS before burst", f"{rss_before / 1024:.0f} MiB ({args.nodes} nodes cached, warm)")
        out("  where (before burst)", mem_before)
        out("operator RSS peak during burst", f"{rss_peak / 1024:.0f} MiB")
        out("operator VmHWM (max)", f"{hwm_max / 1024:.0f} MiB")
        out("operator RSS steady after", f"{steady_rss / 1024:.0f} MiB")
        out("  where (steady after)", memory_breakdown(op.proc.pid))
        out("operator log (burst window)", f"{n_warn} WARNING, {n_err} ERROR lines")
        out("phases at the end", str(dict(sorted(phase_counts.items()))))
        for label, count in sorted(not_ready.items(), key=lambda kv: -kv[1]):
            print(f"    not Ready: {count:3d} x {label}")
            if examples.get(label):
                print(f"      e.g. {examples[label][:200]}")
        out(
            "node health (burst window)",
            f"{len(flips)} Ready/taint changes; at the end {unhealthy}/"
            f"{n_nodes_seen} nodes not Ready or tainted by the node lifecycle controller",
        )
        if by_source:
            ranked = sorted(by_source.items(), key=lambda kv: -kv[1])
            out("Events in bench-* by reporter", ", ".join(f"{k} {v}" for k, v in ranked))
        if probe_lat:
            out(
                "apiserver GET round trip (probe)",
                f"p50 {pct(probe_lat, 0.5) * 1000:.0f} ms, "
                f"p99 {pct(probe_lat, 0.99) * 1000:.0f} ms (n={len(probe_lat)}, burst window)",
            )
        ranked_cpu = sorted(cpu_use.items(), key=lambda kv: -kv[1])
        out("CPU, % of one core (burst+settle)", ", ".join(f"{n} {v:.0f}%" for n, v in ranked_cpu))
        print("  apiserver requests in the burst window (all clients; server-side latency):")
        for tot, cnt, (verb, res, sub) in api_rows[:10]:
            name = f"{verb} {res}{'/' + sub if sub else ''}"
            print(f"    {name:<34} {cnt:6.0f} requests  mean {tot / cnt * 1000:6.1f} ms  total {tot:6.1f} s")
        print("  API Priority and Fairness queue wait in the burst window (priority level / flow schema):")
        for tot, cnt, (_, level, schema) in [r for r in apf_rows if r[1] > 0][:6]:
            name = f"{level} / {schema}"
            print(f"    {name:<44} {cnt:6.0f} requests  mean {tot / cnt * 1000:6.1f} ms  total {tot:6.1f} s")
        out(
            "bench watches",
            f"{sum(w.errors for w in watchers)} reconnects after an error, "
            f"{sum(w.reopened for w in watchers)} re-opened after their {Watcher.WATCH_SECONDS} s",
        )
        out("keys enqueued by cause (burst)", counter_by_label(m_before, m_after))
        filtered = counter_by_label(m_before, m_after, "glm_operator_events_filtered_total", "kind")
        out("child events filtered (no reconcile)", filtered)
        out(
            "watch events received (burst)",
            counter_by_label(m_before, m_after, "glm_operator_watch_events_total", "resource"),
        )
        out("operator CPU per reconcile", f"{cpu_op / max(rec_ok + rec_err, 1) * 1000:.1f} ms")
        out("operator CPU per GLMDeployment", f"{cpu_op / max(len(keys), 1) * 1000:.0f} ms (burst+settle)")
        out(
            "operator API requests per reconcile",
            f"{(operator_requests(m_after) - operator_requests(m_before)) / max(rec_ok + rec_err, 1):.2f} "
            "(burst window; watches not counted)",
        )

        # -- no-op reconciles: every GLMDeployment touched (an annotation: no new generation) --
        m0 = scrape(metrics_port)
        for ns_name in namespaces:
            local.kubectl(
                "annotate", "glmd", "--all", "-n", ns_name, f"bench/noop={time.time():.0f}", "--overwrite"
            )
        wait_until(
            lambda: (
                reconciles_total(scrape(metrics_port, only="glm_operator_reconciles_total"))
                - reconciles_total(m0)
                >= len(docs)
            ),
            60,
        )
        time.sleep(2.0)
        m1 = scrape(metrics_port)
        noop_rec = reconciles_total(m1) - reconciles_total(m0)
        noop_req = operator_requests(m1) - operator_requests(m0)
        out("no-op reconciles", f"{noop_rec:.0f}, {noop_req / max(noop_rec, 1):.2f} API requests each")

        # -- idle: nodes keep renewing their Leases, nothing else happens --------------------
        if args.idle_seconds > 0:
            m0, cpu0, t0 = scrape(metrics_port), cpu_seconds(op.proc.pid), time.monotonic()
            time.sleep(args.idle_seconds)
            m1, cpu1, t1 = scrape(metrics_port), cpu_seconds(op.proc.pid), time.monotonic()
            idle_rss = sampler.read()
            out(
                f"idle {t1 - t0:.0f} s ({args.nodes} nodes)",
                f"operator CPU {(cpu1 - cpu0) / (t1 - t0) * 100:.1f}% of one core, "
                f"{reconciles_total(m1) - reconciles_total(m0):.0f} reconciles, "
                f"{operator_requests(m1) - operator_requests(m0):.0f} API requests, "
                f"RSS {(idle_rss[1] if idle_rss else 0) / 1024:.0f} MiB",
            )
            out("idle: keys enqueued by cause", counter_by_label(m0, m1))
            out(
                "idle: watch events received",
                counter_by_label(m0, m1, "glm_operator_watch_events_total", "resource"),
            )
            out("idle: where", memory_breakdown(op.proc.pid))

        # -- baseline: the same children created directly by 8 client threads ----------------
        # Its pods, and the ideal controller's, must schedule and run as the operator's did:
        # the operator's GLMDeployments are deleted first and each phase is cleared after itself
        # (runs up to 52 measured both with the GPUs taken, so their pods stayed Pending).
        pairs = baseline_copies(local.kubeconfig, namespaces)
        freed = free_gpus(local, k8s.CoreV1Api(), namespaces, "glmdeployments")
        out("GPUs freed for the baseline", f"{freed:.0f} s (the operator's GLMDeployments deleted)")
        base_ns = [f"base-{i}" for i in range(args.namespaces)]
        create_namespaces(local, base_ns)
        base_seen: dict[str, float] = {}

        def on_base(type_: str, obj: dict[str, Any], now: float) -> None:
            meta = obj.get("metadata") or {}
            if type_ == "ADDED":
                with lock:
                    base_seen.setdefault(f"{meta['namespace']}/{meta['name']}", now)

        base_watch = Watcher(
            custom.list_cluster_custom_object, ("apps", "v1", "deployments"), on_base, f"{BASELINE_LABEL}=1"
        )
        watchers.append(base_watch)
        base_watch.start()
        base_watch.connected.wait(10)
        time.sleep(1.0)
        base_sent, base_seconds = create_baseline(local.kubeconfig, pairs, base_ns, args.create_threads)
        wait_until(lambda: len(base_seen) >= len(base_sent), 60, period=0.2)
        with lock:
            lat_base = [base_seen[k] - base_sent[k] for k in base_sent if k in base_seen]
        print("  baseline: the same child Deployments + Services created directly, same apiserver, same run:")
        out("create -> Deployment (direct)", dist(lat_base))
        with lock:
            out("  max by tenth of the creates, in order", slowest_by_tenth(base_sent, base_seen))
        out(
            "created",
            f"{len(base_sent)} pairs in {base_seconds:.2f} s ({args.create_threads} client threads)",
        )
        if lat_base and lat_child:
            out(
                "operator / baseline",
                f"p50 x{pct(lat_child, 0.5) / max(pct(lat_base, 0.5), 1e-6):.1f}, "
                f"p99 x{pct(lat_child, 0.99) / max(pct(lat_base, 0.99), 1e-6):.1f} "
                "(apply -> child Deployment)",
            )

        free_gpus(local, k8s.CoreV1Api(), base_ns, "deployments")

        # -- the same burst again, answered by an ideal event-driven controller ----------------
        # (what the apiserver allows under this load: the direct baseline above is measured on a
        # quiet apiserver, from the moment each create is sent, so without the GLMDeployment
        # create in front of it and without any wait for a free client thread)
        print(
            "  ideal controller: the same burst into ideal*-* namespaces (not served by the operator), "
            "answered by a watch that POSTs (--ideal-apply: applies) the same children "
            "(no planning, status or queue):"
        )
        first_sent = min(sent.values())
        schedule = {k.split("/", 1)[1]: t - first_sent for k, t in sent.items()}
        bursts = [(t, False) for t in args.ideal_threads]
        bursts += [(t, True) for t in args.ideal_workloads_first_threads]
        for threads, workloads_first in bursts:
            name = f"{threads} thr.{', workloads first' if workloads_first else ''}"
            settled = wait_pods_settled(k8s.CoreV1Api())
            ideal_before = scrape_apiserver(local)
            lat_ideal, lat_seen, ideal_seconds, errors = run_ideal_controller(
                local,
                custom,
                pairs,
                args.glmds,
                args.namespaces,
                threads,
                args.create_threads,
                schedule,
                args.ideal_apply,
                workloads_first,
            )
            ideal_after = scrape_apiserver(local)
            if not settled:
                print("  (pods of the previous phase were still starting when this burst began)", flush=True)
            out(f"apply -> child Deployment ({name})", dist(lat_ideal))
            out(f"apply -> GLMDeployment seen ({name})", dist(lat_seen))
            out("created", f"{len(lat_seen)} GLMDeployments in {ideal_seconds:.2f} s; {errors} create errors")
            out(
                "its creates, server side",
                request_means(
                    ideal_before, ideal_after, IDEAL_APPLIES if args.ideal_apply else IDEAL_REQUESTS
                ),
            )
            if lat_ideal and lat_child:
                out(
                    f"operator / ideal ({name})",
                    f"p50 x{pct(lat_child, 0.5) / max(pct(lat_ideal, 0.5), 1e-6):.1f}, "
                    f"p99 x{pct(lat_child, 0.99) / max(pct(lat_ideal, 0.99), 1e-6):.1f} "
                    "(apply -> child Deployment)",
                )
            ideal_ns = [f"ideal{ideal_tag(threads, workloads_first)}-{i}" for i in range(args.namespaces)]
            free_gpus(local, k8s.CoreV1Api(), ideal_ns, "glmdeployments,deployments")

        out("total script time", f"{time.monotonic() - started:.0f} s")
        if n_err:
            print("  operator ERRORs in the burst window (first 3, with the exception raised):")
            shown = 0
            for block in re.split(r"\n(?=\d{4}-\d\d-\d\d )", log_text):
                if " ERROR " not in block.split("\n", 1)[0]:
                    continue
                lines = [ln for ln in block.splitlines() if ln.strip()]
                cause = next((ln for ln in reversed(lines) if re.match(r"[\w.]+(Error|Exception)\b", ln)), "")
                body = next((ln for ln in lines if ln.startswith("HTTP response body")), "")
                print("    " + lines[0][:200])
                for extra in (cause, body):
                    if extra:
                        print("      " + extra[:240])
                shown += 1
                if shown >= 3:
                    break
        return 0
    finally:
        for w in watchers:
            w.stop()
        if sampler is not None:
            sampler.stop_event.set()
        if profiler is not None and profiler.poll() is None:
            profiler.kill()
        with contextlib.suppress(Exception):
            op.stop()
        with contextlib.suppress(Exception):
            local.down()
        if args.keep:
            print(f"  kept {tmp}")
        else:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
