"""The GLMDeployment reconciler: observe -> desired -> apply -> status, one key at a time.

- **observe** reads the GLMDeployment, its children and pods, its recorded load test (a ConfigMap
  it owns), the nodes and the GPUs other workloads hold from the watch-fed caches (no apiserver
  request);
- **desired** runs ``glm_operator.desired.compute_desired`` (pure) in a planning thread, bounded in
  time, so one huge spec never stalls the event loop; the autoscaler gets what the plan gives it
  to scale on;
- **apply** server-side-applies what is wanted (``Applier``: workloads first, unchanged children
  not sent) and prunes what is not, never while a replacement was refused;
- **status** is written only when it changed, conditional on the resourceVersion it was computed
  from (a status from an older read is never written over a newer one), then the Events go out in
  the background (``EventRecorder``).

Every step is idempotent, so a reconcile interrupted anywhere (operator killed, Lease lost) is
finished by the next one without duplicates or orphans. A failure re-adds the key with backoff; a
child the apiserver refuses makes the GLMDeployment Degraded/ChildRejected with the apiserver's own
message and is retried with backoff too.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Mapping
from typing import Any

from glm_operator.api.v1alpha1 import AutoscalingSpec, GLMDeploymentSpec
from glm_operator.clients.kube import KubeClient
from glm_operator.controller import metrics
from glm_operator.controller.applier import Applier, Rejection
from glm_operator.controller.autoscaler import Autoscaler
from glm_operator.controller.cache import ClusterCache
from glm_operator.controller.clock import Clock, rfc3339
from glm_operator.controller.config import OperatorConfig
from glm_operator.controller.discovery import ApiDiscovery
from glm_operator.controller.nodepools import NodePoolCache
from glm_operator.controller.pages import PlanPages
from glm_operator.controller.pod_monitors import PodMonitorMode
from glm_operator.controller.recorder import EventRecorder
from glm_operator.controller.retry import retry_failed
from glm_operator.controller.workqueue import Key, WorkQueue
from glm_operator.desired import WORKLOAD_KIND_NAMES, Desired, Event, Observed, compute_desired
from glm_operator.desired import status as status_step
from glm_operator.planning.diagnosis.conditions import MetricsStatus
from glm_operator.render import names
from glm_operator.render.inference_pool import INFERENCE_POOL_KIND, INFERENCE_POOL_KINDS
from glm_operator.render.monitoring import POD_MONITOR_KIND

log = logging.getLogger(__name__)

PLANNING_THREADS = 2  # planning is CPU-bound (the GIL): more threads would not plan faster
COMPANION_KINDS = frozenset({"Service", "PodDisruptionBudget"})

PROMETHEUS_NOT_CONFIGURED = MetricsStatus(
    False,
    "PrometheusNotConfigured",
    "spec.autoscaling is set but the operator has no Prometheus URL (glm-operator run "
    "--prometheus-url, chart value prometheus.url); replicas stay at autoscaling.minReplicas",
)


class PlanningTimeout(Exception):
    """Planning one GLMDeployment took longer than its bound."""


def _owned_by(obj: Mapping[str, Any], uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in obj.get("metadata", {}).get("ownerReferences") or [])


def _of_inference_pool(obj: Mapping[str, Any]) -> bool:
    """The InferencePool, or an object of its endpoint picker (not a vLLM workload or Service)."""
    labels = obj.get("metadata", {}).get("labels") or {}
    return obj.get("kind") == INFERENCE_POOL_KIND or labels.get(names.LABEL_COMPONENT) == (
        names.COMPONENT_ENDPOINT_PICKER
    )


class GLMDeploymentReconciler:
    def __init__(
        self,
        *,
        api: KubeClient,
        cache: ClusterCache,
        nodepools: NodePoolCache,
        discovery: ApiDiscovery,
        applier: Applier,
        recorder: EventRecorder,
        queue: WorkQueue[Key],
        config: OperatorConfig,
        clock: Clock,
        autoscaler: Autoscaler | None = None,
        pages: PlanPages | None = None,
    ) -> None:
        """``autoscaler``: None when none runs (no Prometheus configured); each reconcile reads its
        view of the metrics and hands it what the plan gives to scale on. ``pages``: where each
        reconcile leaves its plan for the metrics port's plan pages."""
        self.api = api
        self.cache = cache
        self.nodepools = nodepools
        self.discovery = discovery
        self.applier = applier
        self.recorder = recorder
        self.queue = queue
        self.config = config
        self.clock = clock
        self.autoscaler = autoscaler
        self.pages = pages
        self._planning = concurrent.futures.ThreadPoolExecutor(
            PLANNING_THREADS, thread_name_prefix="planning"
        )
        self._overrunning: set[Key] = set()  # keys whose last plan overran its bound and still runs

    def stop(self) -> None:
        self._planning.shutdown(wait=False, cancel_futures=True)

    # -- the loop's entry point ---------------------------------------------------------------------
    async def reconcile(self, key: Key) -> None:
        """One reconcile; a failure re-adds the key with backoff and logs one line."""
        started = self.clock.monotonic()
        try:
            rejected = await self._reconcile(key)
        except Exception as exc:
            metrics.RECONCILES.labels(result="error").inc()
            retry_failed(self.queue, key, "reconcile", exc)
            return
        finally:
            metrics.RECONCILE_SECONDS.observe(self.clock.monotonic() - started)
        if rejected:
            metrics.RECONCILES.labels(result="error").inc()
            delay = self.queue.add_rate_limited(key)
            log.warning(
                "reconcile %s/%s: the apiserver rejected %s; Degraded/ChildRejected, retry in %.2f s",
                *key,
                "; ".join(f"{r.kind} {r.name}: {r.error.line()}" for r in rejected)[:2000],
                delay,
            )
        else:
            metrics.RECONCILES.labels(result="ok").inc()
            self.queue.forget(key)

    async def _reconcile(self, key: Key) -> list[Rejection]:
        found = self.observe(key)
        if found is None:  # deleted: its children go with it (owner references)
            self.applier.forget(key)
            if self.autoscaler is not None:
                self.autoscaler.planned(key, None)
            metrics.forget(*key)
            if self.pages is not None:
                self.pages.forget(key)
            return []
        observed, companions = found
        desired = await self.desired(key, observed)
        if self.autoscaler is not None:
            self.autoscaler.planned(key, desired.scaling)
        result = await self.applier.apply(
            key,
            desired.objects,
            [*observed.children, *companions, *observed.pod_monitors, *observed.inference_pool_children],
            tolerate_missing_pod_monitor_api=self.config.pod_monitor is PodMonitorMode.AUTO,
        )
        rejected = [*result.rejected, *self.applier.rejected_companions(key)]
        if desired.prune and all(r.kind == POD_MONITOR_KIND for r in rejected):
            await self.applier.prune(key, desired.prune)
        await self.write_status(key, observed, desired, rejected)
        if desired.requeue_after is not None:  # a node grace period ends: no watch event will say so
            self.queue.add_after(key, desired.requeue_after)
        return rejected

    # -- observe --------------------------------------------------------------------------------
    def observe(self, key: Key) -> tuple[Observed, list[dict[str, Any]]] | None:
        """What ``compute_desired`` reads, plus the GLMDeployment-wide children (Service, PDB)."""
        body = self.cache.owned.glmdeployments.get(key)
        if body is None or body.get("metadata", {}).get("deletionTimestamp"):
            return None
        uid = str(body["metadata"].get("uid", ""))
        kinds = (
            WORKLOAD_KIND_NAMES if self.discovery.lws_served else WORKLOAD_KIND_NAMES - {"LeaderWorkerSet"}
        )
        owned = self.cache.owned
        children = [
            c for c in owned.children_of(key, kinds) if _owned_by(c, uid) and not _of_inference_pool(c)
        ]
        companions = [
            c
            for c in owned.children_of(key, COMPANION_KINDS)
            if _owned_by(c, uid) and not _of_inference_pool(c)
        ]
        pod_monitors = [c for c in owned.children_of(key, {POD_MONITOR_KIND}) if _owned_by(c, uid)]
        pool_children = [
            c
            for c in owned.children_of(key, INFERENCE_POOL_KINDS)
            if _owned_by(c, uid) and _of_inference_pool(c)
        ]
        load_test_name = names.load_test_name(key[1])
        load_tests = [
            c
            for c in owned.children_of(key, {"ConfigMap"})
            if _owned_by(c, uid) and c["metadata"].get("name") == load_test_name
        ]
        autoscaling = bool((body.get("spec") or {}).get("autoscaling"))
        view = (
            self.autoscaler.metrics_status(key) if self.autoscaler is not None else PROMETHEUS_NOT_CONFIGURED
        )
        observed = Observed(
            body=body,
            nodes=list(self.cache.nodes.values()),
            gpus_used=self.cache.gpus_used(exclude_owner=key),
            children=children,
            pods=owned.pods_of(key),
            default_image=self.config.default_image,
            now=rfc3339(self.clock.now()),
            metrics=view if autoscaling else None,
            lws_available=self.discovery.lws_served,
            node_grace_seconds=self.config.node_grace_seconds,
            elastic=self.nodepools.elastic_input(self.config),
            pod_monitor=self.discovery.pod_monitor_wanted,
            pod_monitors=pod_monitors,
            inference_pool_api=self.discovery.inference_pools_served,
            inference_pool_children=pool_children,
            load_test=load_tests[0] if load_tests else None,
        )
        return observed, companions

    # -- desired --------------------------------------------------------------------------------
    async def desired(self, key: Key, observed: Observed) -> Desired:
        """``compute_desired`` in a planning thread, bounded by ``planning_timeout_seconds``."""
        bound = self.config.planning_timeout_seconds
        if key in self._overrunning:  # its last plan still runs in a thread: do not start a second one
            raise PlanningTimeout(f"planning is still running after more than {bound:.0f} s")
        future = self._planning.submit(compute_desired, observed)
        try:
            return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), bound)
        except TimeoutError as exc:
            self._overrunning.add(key)
            future.add_done_callback(lambda _: self._overrunning.discard(key))
            raise PlanningTimeout(
                f"planning took longer than {bound:.0f} s (is spec.model.config huge?)"
            ) from exc

    # -- status ---------------------------------------------------------------------------------
    async def write_status(
        self, key: Key, observed: Observed, desired: Desired, rejected: list[Rejection]
    ) -> None:
        body = observed.body
        status = status_step.own_fields(body, desired.status, autoscaler_running=self.autoscaler is not None)
        if rejected:
            status = status_step.with_rejections(
                observed, status, [(r.kind, r.name, r.error.line()) for r in rejected], POD_MONITOR_KIND
            )
        events = list(desired.events)
        if status_step.changed(dict(body.get("status") or {}), status):
            version = str(body["metadata"].get("resourceVersion") or "") or None
            written = await asyncio.to_thread(self.api.patch_status, *key, status, version)
            self.cache.owned.set_glmdeployment(written)  # before the key can run again
            events += [
                Event(
                    "Warning", "ChildRejected", status_step.rejection_message(r.kind, r.name, r.error.line())
                )
                for r in rejected
            ]
        self.recorder.post(body, events)
        now = {**(body.get("status") or {}), **status}
        if self.pages is not None:
            self.pages.record(key, desired.plan, now)
        spec = body.get("spec") or {}
        metrics.record(
            key, desired.plan, now, str((spec.get("model") or {}).get("id") or ""), max_replicas(spec)
        )


def max_replicas(spec: Mapping[str, Any]) -> int | None:
    """spec.autoscaling.maxReplicas, else spec.replicas (what the queue alert compares against)."""
    autoscaling = spec.get("autoscaling")
    if isinstance(autoscaling, Mapping):
        value = autoscaling.get("maxReplicas", AutoscalingSpec.model_fields["max_replicas"].default)
    else:
        value = spec.get("replicas", GLMDeploymentSpec.model_fields["replicas"].default)
    return value if isinstance(value, int) else None
