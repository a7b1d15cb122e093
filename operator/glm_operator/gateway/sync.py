"""The gateway sidecar: watch GLMDeployments, Pods and the GLMGateway, keep HAProxy in step.

One list of each kind (in the gateway's namespace) fills a store, then the operator's watch layer
(``clients.watches``: kopf in a thread of its own, started again if it stops) keeps it current;
every change wakes the main loop, which recomputes the routing table (pure) and applies it: runtime
API commands when only members changed, new files and a graceful reload when the served names or
the settings changed. The API-key file is the mounted Secret; when its content changes the proxy
reloads. Nothing here polls the apiserver.

Per-key counters from the proxy's stick table are exported on ``--metrics-port`` when scraped.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glm_operator.api.gateway import GATEWAY_PLURAL, GLMGatewaySpec
from glm_operator.api.v1alpha1 import GROUP, PLURAL, VERSION
from glm_operator.clients.haproxy import HAProxyRuntime
from glm_operator.clients.watches import Sink, Watch, WatchThread, safely
from glm_operator.clients.watches import registry as watch_registry
from glm_operator.clients.watches import settings as watch_settings
from glm_operator.gateway.haproxy_config import (
    HTTP_PORT,
    PEERS_PORT,
    PROXY_METRICS_PORT,
    WAKE_TABLE,
    Balance,
    GatewaySettings,
    Peer,
)
from glm_operator.gateway.objects import GATEWAY_APP_NAME
from glm_operator.gateway.proxy import ProxyDriver
from glm_operator.gateway.routes import RoutingTable, compute_routing_table
from glm_operator.render import names

log = logging.getLogger(__name__)

#: One pods watch for the vLLM pods and the gateway's own pods (its peers): both are the operator's.
WATCHED_PODS = f"{names.LABEL_PART_OF}={names.PART_OF}"
GATEWAY_PODS = "gateway-pods"
#: Seconds before a model still requested without a usable replica is reported again.
WAKE_REPORT_INTERVAL = 10.0
BALANCE: dict[str, Balance] = {
    "LeastRequests": "leastconn",
    "RoundRobin": "roundrobin",
    "PrefixAffinity": "cache",
}


@dataclass(frozen=True)
class SyncOptions:
    namespace: str
    gateway: str
    config_dir: str
    keys_file: str | None
    port: int = HTTP_PORT
    bind_address: str = "0.0.0.0"
    proxy_metrics_port: int | None = PROXY_METRICS_PORT
    master_socket: str | None = None
    #: Tests: JSON {pod IP or "*": loopback address}, for vLLM pods and the gateway's own (peers);
    #: unmapped pods are left out.
    address_map: str | None = None
    pod_name: str | None = None  # this gateway pod; with pod_ip, the replicas share the per-key table
    pod_ip: str | None = None
    peers_port: int = PEERS_PORT


def gateway_peers(pods: Iterable[Mapping[str, Any]], options: SyncOptions) -> tuple[Peer, ...]:
    """Every replica of this gateway with an address (this one always), sorted by name; empty
    without ``pod_name``/``pod_ip``: then each replica keeps its own per-key table."""
    if not options.pod_name or not options.pod_ip:
        return ()
    addresses = {options.pod_name: options.pod_ip}
    for pod in pods:
        meta = pod.get("metadata") or {}
        ip = (pod.get("status") or {}).get("podIP")
        if ip and not meta.get("deletionTimestamp"):
            addresses.setdefault(str(meta["name"]), str(ip))
    return tuple(Peer(name, address, options.peers_port) for name, address in sorted(addresses.items()))


def settings_for(spec: GLMGatewaySpec, options: SyncOptions, peers: tuple[Peer, ...] = ()) -> GatewaySettings:
    """Proxy settings from the GLMGateway spec, the pod-level options and the gateway's replicas."""
    return GatewaySettings(
        config_dir=options.config_dir,
        runtime_socket=str(Path(options.config_dir) / "admin.sock"),
        bind_address=options.bind_address,
        port=options.port,
        metrics_port=options.proxy_metrics_port,
        keys_file=options.keys_file,
        requests_per_minute=spec.limits.requests_per_minute,
        tokens_per_minute=spec.limits.tokens_per_minute,
        max_concurrent_requests=spec.limits.concurrent_requests,
        read_timeout_seconds=spec.read_timeout_seconds,
        connect_timeout_seconds=spec.connect_timeout_seconds,
        max_body_bytes=spec.max_body_bytes,
        balance=BALANCE[spec.load_balancing],
        slots=spec.max_pods_per_model,
        peers=peers,
        local_peer=options.pod_name if peers else None,
        allowed_models=tuple((c.name, tuple(c.models)) for c in spec.clients),
        hold_max_requests=spec.scale_from_zero.max_queued_requests,
        hold_max_wait_seconds=spec.scale_from_zero.max_wait_seconds,
        wake_retry_after_seconds=spec.scale_from_zero.retry_after_seconds,
    )


def map_addresses(pods: Iterable[Mapping[str, Any]], mapping: Mapping[str, str]) -> list[dict[str, Any]]:
    """Pods with their IP replaced by ``mapping[ip]`` (``mapping["*"]`` for any IP not named);
    pods whose IP is not mapped, or that have none, are left out."""
    mapped = []
    for pod in pods:
        ip = (pod.get("status") or {}).get("podIP")
        address = mapping.get(str(ip), mapping.get("*")) if ip else None
        if address is not None:
            mapped.append({**pod, "status": {**pod["status"], "podIP": address}})
    return mapped


class Store:
    """Objects by kind and name, as the watches last saw them; ``changed`` is set on every update."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._objects: dict[str, dict[str, dict[str, Any]]] = {}
        self.changed = threading.Event()

    def replace(self, kind: str, items: Iterable[dict[str, Any]]) -> None:
        with self._lock:
            self._objects[kind] = {i["metadata"]["name"]: i for i in items}
        self.changed.set()

    def update(self, kind: str, event_type: str, obj: dict[str, Any]) -> None:
        with self._lock:
            objects = self._objects.setdefault(kind, {})
            if event_type == "DELETED":
                objects.pop(obj["metadata"]["name"], None)
            else:
                objects[obj["metadata"]["name"]] = obj
        self.changed.set()

    def items(self, kind: str) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._objects.get(kind, {}).values())


def watches(gateway: str) -> tuple[Watch[Store], ...]:
    """What the sidecar watches in its namespace, each into the store under its plural."""

    def into(kind: str) -> Callable[[Store], Sink]:
        return lambda store: lambda event_type, obj: store.update(kind, event_type or "ADDED", obj)

    def pods(store: Store) -> Sink:
        return lambda event_type, obj: store.update(pod_kind(obj, gateway), event_type or "ADDED", obj)

    return (
        Watch(GROUP, VERSION, PLURAL, into(PLURAL)),
        Watch(GROUP, VERSION, GATEWAY_PLURAL, into(GATEWAY_PLURAL), name=gateway),
        Watch("", "v1", "pods", pods, server_selector=WATCHED_PODS),
    )


def pod_kind(pod: Mapping[str, Any], gateway: str) -> str:
    """Where a watched pod goes in the store: this gateway's replicas, vLLM pods, or nowhere."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if labels.get(names.LABEL_NAME) == GATEWAY_APP_NAME and labels.get(
        names.LABEL_INSTANCE
    ) == names.label_value(gateway):
        return GATEWAY_PODS
    return "pods" if labels.get(names.LABEL_COMPONENT) == names.COMPONENT_INFERENCE else "other-pods"


def sidecar_settings(table: tuple[Watch[Store], ...]) -> Any:
    """kopf's settings for the sidecar: no CRD or namespace observation (its Role is namespaced,
    and what it watches exists before it starts), the rest as the operator's."""
    settings = watch_settings(table)
    settings.scanning.disabled = True
    return settings


class GatewaySync:
    """Watches the namespace and drives one HAProxy (or, with ``once``, writes its first files)."""

    def __init__(self, options: SyncOptions, runtime: HAProxyRuntime | None) -> None:
        self.options = options
        self.store = Store()
        self.runtime = runtime
        self.driver: ProxyDriver | None = None
        self._keys_digest: str | None = None
        self._wake_counts: dict[str, int] = {}  # backend -> requests counted without a usable server
        self._wake_reported: dict[str, float] = {}  # backend -> when it was last reported (monotonic)

    def _address_map(self) -> dict[str, str] | None:
        if self.options.address_map is None:
            return None
        try:
            data = json.loads(Path(self.options.address_map).read_text())
        except (OSError, ValueError):
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def _keys_changed(self) -> bool:
        if self.options.keys_file is None:
            return False
        try:
            digest = hashlib.sha256(Path(self.options.keys_file).read_bytes()).hexdigest()
        except OSError:
            digest = ""
        changed = self._keys_digest is not None and digest != self._keys_digest
        self._keys_digest = digest
        return changed

    def desired(self) -> tuple[GatewaySettings, RoutingTable] | None:
        """Settings and routing table from the store; None until the GLMGateway is seen."""
        gateways = [
            g for g in self.store.items(GATEWAY_PLURAL) if g["metadata"]["name"] == self.options.gateway
        ]
        if not gateways:
            return None
        pods, gateway_pods = self.store.items("pods"), self.store.items(GATEWAY_PODS)
        mapping = self._address_map()
        if mapping is not None:
            pods, gateway_pods = map_addresses(pods, mapping), map_addresses(gateway_pods, mapping)
        peers = gateway_peers(gateway_pods, self.options)
        settings = settings_for(
            GLMGatewaySpec.model_validate(gateways[0].get("spec") or {}), self.options, peers
        )
        if self.driver is None:
            self.driver = ProxyDriver(settings, self.runtime)
            if self.runtime is not None:
                self.driver.resume()  # the proxy runs the files an earlier process wrote
        previous = self.driver.current.slots() if self.driver.current else None
        table = compute_routing_table(self.store.items(PLURAL), pods, slots=settings.slots, previous=previous)
        return settings, table

    def step(self) -> str:
        """Apply the current desired state once; returns what the driver did."""
        desired = self.desired()
        if desired is None:
            return "waiting"
        settings, table = desired
        assert self.driver is not None  # made by desired()
        self.driver.settings = settings
        if self._keys_changed():
            log.info("API keys changed: reloading")
            self.driver.current = None  # forces new files and a reload
            self.driver.write(table)
            self.driver.reload()  # if it fails, the next step's apply reloads
            self.driver.current = table
            return "reload"
        for detail in table.details:
            log.warning("%s", detail)
        return self.driver.apply(table)

    def new_wake_requests(self, now: float | None = None) -> list[str]:
        """Served names requested since the last call while none of their servers was usable
        (HAProxy's ``wake`` table: a backend's count changed; it went down when a reload started the
        table again, and a count above zero there is a new request too). A model is reported again
        only after ``WAKE_REPORT_INTERVAL`` seconds: a model down for long under traffic costs the
        apiserver one write per pod per interval, not one per request."""
        if self.runtime is None or self.driver is None or self.driver.current is None:
            return []
        now = time.monotonic() if now is None else now
        counts = {e.client: e.requests_total for e in self.runtime.key_counters(WAKE_TABLE)}
        models = {b.name: b.model for b in self.driver.current.backends}
        due = [
            name
            for name, count in counts.items()
            if name in models
            and count > 0
            and count != self._wake_counts.get(name, 0)
            and now - self._wake_reported.get(name, -WAKE_REPORT_INTERVAL) >= WAKE_REPORT_INTERVAL
        ]
        for name in due:
            self._wake_counts[name] = counts[name]
            self._wake_reported[name] = now
        return sorted(models[name] for name in due)

    def report_wake(self, api_client: Any, models: list[str], now: str) -> None:
        """``status.wake`` of the GLMGateway: the operator wakes those models at once (merge patch:
        the list is this pod's latest; the operator never writes it)."""
        from kubernetes import client as k8s

        body = {"status": {"wake": [{"model": m, "requestedAt": now} for m in models]}}
        k8s.CustomObjectsApi(api_client).patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            self.options.namespace,
            GATEWAY_PLURAL,
            self.options.gateway,
            body,
            _content_type="application/merge-patch+json",
        )
        log.info("asked the operator to wake: %s", ", ".join(models))

    def list_all(self, api_client: Any) -> None:
        """One list of each kind into the store (blocking)."""
        from kubernetes import client as k8s

        custom = k8s.CustomObjectsApi(api_client)
        ns = self.options.namespace
        only_ours = f"metadata.name={self.options.gateway}"
        glmds: Any = custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)
        gateways: Any = custom.list_namespaced_custom_object(
            GROUP, VERSION, ns, GATEWAY_PLURAL, field_selector=only_ours
        )
        listed = k8s.CoreV1Api(api_client).list_namespaced_pod(ns, label_selector=WATCHED_PODS)
        pods = [api_client.sanitize_for_serialization(p) for p in listed.items]
        self.store.replace(PLURAL, glmds.get("items") or [])
        self.store.replace(GATEWAY_PLURAL, gateways.get("items") or [])
        for kind in ("pods", GATEWAY_PODS):
            self.store.replace(kind, [p for p in pods if pod_kind(p, self.options.gateway) == kind])

    def start_watches(self) -> WatchThread:
        table = watches(self.options.gateway)
        registry = watch_registry(table, self.store, safely)  # the store takes events from any thread
        thread = WatchThread(
            registry, (self.options.namespace,), settings_factory=lambda: sidecar_settings(table)
        )
        thread.start()
        return thread

    def run(self, api_client: Any, stop: threading.Event, *, once: bool = False, timeout: float = 60) -> int:
        """Watch and apply until ``stop``; ``once``: write the files from the first listing and return."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.list_all(api_client)
                break
            except Exception as err:  # the apiserver may be away while the pod starts
                log.warning("listing failed (%s); retrying", err)
                if stop.wait(1.0) or (once and time.monotonic() > deadline):
                    return 1
        if once:
            desired = self.desired()
            if desired is None:
                log.error("GLMGateway %s/%s not found", self.options.namespace, self.options.gateway)
                return 1
            ProxyDriver(desired[0], None).write(desired[1])
            log.info("wrote the proxy's files: models %s", ", ".join(desired[1].models) or "none")
            return 0
        watching = self.start_watches()
        first = True
        try:
            while not stop.is_set():
                # The timeout re-reads the mounted key file and the proxy's wake table.
                self.store.changed.wait(timeout=1.0)
                self.store.changed.clear()
                stop.wait(0.1)  # let a burst of events land together
                try:
                    if woken := self.new_wake_requests():
                        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                        self.report_wake(api_client, woken, stamp)
                    done = self.step()
                    if done not in ("none", "waiting") or first:
                        log.info("gateway in step (%s)", done)
                    first = False
                except Exception as err:
                    log.warning("could not update the proxy (%s); retrying", err)
                    stop.wait(1.0)
                    self.store.changed.set()
        finally:
            watching.stop()
        return 0
