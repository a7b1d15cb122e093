"""Which optional APIs the apiserver serves: the prometheus-operator's PodMonitor, LeaderWorkerSet
and the Gateway API Inference Extension's InferencePool (the last two asked at start-up and once per
resync period only: a GLMDeployment with spec.inferencePool gets its pool at the first resync after
the CRD is installed, and its status says so meanwhile).

Asked at start-up, on every event of the PodMonitor CRD (created, Established, being deleted,
deleted) and once per resync period, so installing the prometheus-operator or LeaderWorkerSet
after the operator needs no restart. API discovery lags the CRD's own Established condition, and a
CRD created a moment ago answers 429 "storage is (re)initializing": after a CRD event discovery is
asked again with backoff (0.5 s doubling, about a minute in all) until it agrees with what the CRD
says. A change calls ``on_change`` (the operator re-plans every GLMDeployment, each then creates
or stops expecting its PodMonitor).

``--pod-monitor`` (``PodMonitorMode``): ``auto`` renders PodMonitors while the API is served, ``on``
always (an apiserver without it rejects them: Degraded/ChildRejected says so), ``off`` never (and
prunes the ones an earlier setting made).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from glm_operator.clients.kube import KubeClient, summarize_api_error
from glm_operator.controller.pod_monitors import PodMonitorMode, pod_monitor_wanted
from glm_operator.render.inference_pool import INFERENCE_POOL_API_VERSION, INFERENCE_POOL_PLURAL
from glm_operator.render.monitoring import POD_MONITOR_API_VERSION, POD_MONITOR_CRD, POD_MONITOR_PLURAL
from glm_operator.render.objects import LWS_API_VERSION

log = logging.getLogger(__name__)

RECHECK_ATTEMPTS = 8
RECHECK_FIRST_DELAY = 0.5


def crd_serves(crd: Mapping[str, Any], api_version: str) -> bool:
    """Whether a CustomResourceDefinition object says it serves ``api_version`` (Established)."""
    group = (crd.get("spec") or {}).get("group")
    versions = {str(v.get("name")) for v in (crd.get("spec") or {}).get("versions") or [] if v.get("served")}
    conditions = (crd.get("status") or {}).get("conditions") or []
    established = any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)
    return established and any(f"{group}/{v}" == api_version for v in versions)


async def _nothing() -> None:
    return None


class ApiDiscovery:
    def __init__(
        self,
        api: KubeClient,
        pod_monitor_mode: PodMonitorMode,
        on_pod_monitors_change: Callable[[bool], None] = lambda served: None,
        load_pod_monitors: Callable[[], Awaitable[None]] = _nothing,
    ) -> None:
        """``on_pod_monitors_change``: called with True when PodMonitors became served, False when
        they went away; ``load_pod_monitors``: lists the existing PodMonitors into the caches,
        before they count as served."""
        self.api = api
        self.pod_monitor_mode = pod_monitor_mode
        self.lws_served = False
        self.inference_pools_served = False
        self.pod_monitors_served = False
        self.on_pod_monitors_change = on_pod_monitors_change
        self.load_pod_monitors = load_pod_monitors
        self._recheck: asyncio.Task[None] | None = None

    @property
    def pod_monitor_wanted(self) -> bool:
        return pod_monitor_wanted(self.pod_monitor_mode, self.pod_monitors_served)

    async def refresh(self) -> None:
        """Ask discovery about the optional APIs (start-up, resync)."""
        self.lws_served = await asyncio.to_thread(self.api.api_available, LWS_API_VERSION)
        self.inference_pools_served = await asyncio.to_thread(
            self.api.serves_resource, INFERENCE_POOL_API_VERSION, INFERENCE_POOL_PLURAL
        )
        await self.refresh_pod_monitors()

    def log_state(self) -> None:
        """One line at start-up: what was found."""
        log.info(
            "PodMonitor API %s %s (--pod-monitor=%s); LeaderWorkerSet API %s %s; InferencePool API %s %s",
            POD_MONITOR_API_VERSION,
            "found" if self.pod_monitors_served else "not served",
            self.pod_monitor_mode,
            LWS_API_VERSION,
            "found" if self.lws_served else "not served",
            INFERENCE_POOL_API_VERSION,
            "found" if self.inference_pools_served else "not served",
        )

    async def refresh_pod_monitors(self) -> bool:
        """Ask whether PodMonitors are served; on a change, load the existing ones first
        (``load_pod_monitors``: a failure leaves the API unserved for the next try), then call
        ``on_pod_monitors_change``."""
        served = await asyncio.to_thread(
            self.api.serves_resource, POD_MONITOR_API_VERSION, POD_MONITOR_PLURAL
        )
        if served and not self.pod_monitors_served:
            await self.load_pod_monitors()
        if served != self.pod_monitors_served:
            self.set_pod_monitors_served(served)
        return served

    def set_pod_monitors_served(self, served: bool) -> None:
        log.info(
            "PodMonitor API %s %s (--pod-monitor=%s)",
            POD_MONITOR_API_VERSION,
            "found" if served else "gone",
            self.pod_monitor_mode,
        )
        self.pod_monitors_served = served
        self.on_pod_monitors_change(served)

    def on_crd(self, event_type: str | None, crd: Mapping[str, Any]) -> None:
        """The PodMonitor CRD was created, changed or deleted."""
        if str((crd.get("metadata") or {}).get("name")) != POD_MONITOR_CRD:
            return
        if (crd.get("metadata") or {}).get("deletionTimestamp"):
            # Being deleted: discovery lists it until it is gone, but the apiserver already refuses
            # new objects and deletes the existing ones. Stop applying now; DELETED follows.
            self.pod_monitor_api_missing()
            return
        self._recheck_soon(event_type != "DELETED" and crd_serves(crd, POD_MONITOR_API_VERSION))

    def pod_monitor_api_missing(self) -> None:
        """An apply was refused because the API went away, or its CRD is being deleted."""
        if self.pod_monitors_served:
            self.set_pod_monitors_served(False)

    def _recheck_soon(self, expected: bool) -> None:
        previous = self._recheck

        async def recheck() -> None:
            if previous is not None and not previous.done():  # it may have read discovery before this event
                previous.cancel()
                with contextlib.suppress(BaseException):
                    await previous
            delay = RECHECK_FIRST_DELAY
            for _ in range(RECHECK_ATTEMPTS):
                try:
                    if await self.refresh_pod_monitors() == expected:
                        return
                except Exception as exc:
                    log.warning("PodMonitor API discovery failed: %s", summarize_api_error(exc).line())
                await asyncio.sleep(delay)
                delay *= 2

        self._recheck = asyncio.create_task(recheck(), name="pod-monitor-discovery")

    def stop(self) -> asyncio.Task[None] | None:
        if self._recheck is not None:
            self._recheck.cancel()
        return self._recheck
