"""``glm-operator run``: start the operator (kopf) against the current kubeconfig or in-cluster."""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

from glm_operator.clients.prometheus import (
    DEFAULT_KV_CACHE_QUERY,
    DEFAULT_RUNNING_QUERY,
    DEFAULT_WAITING_QUERY,
)
from glm_operator.controller.config import DEFAULT_SYNC_IMAGE, DEFAULT_VLLM_IMAGE, OperatorConfig
from glm_operator.controller.pod_monitors import PodMonitorMode
from glm_operator.gateway.network_policy import network_policy_settings
from glm_operator.planning.supply.outages import DEFAULT_NODE_GRACE_SECONDS


def _env(name: str, default: str | None = None) -> str | None:
    """Chart-provided settings come as GLM_OPERATOR_* environment variables; flags override them."""
    value = os.environ.get(f"GLM_OPERATOR_{name}")
    return value if value else default


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("run", help="run the operator", description="Run the GLMDeployment operator.")
    _add_scope_and_endpoints(p)
    _add_serving_and_metrics(p)
    _add_reconciling(p)
    _add_leader_election_and_logging(p)
    p.set_defaults(func=run)


def _add_scope_and_endpoints(p: argparse.ArgumentParser) -> None:
    """Which namespaces to watch; the health and metrics endpoints."""
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace (default)")
    scope.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[ns.strip() for ns in (_env("WATCH_NAMESPACES") or "").split(",") if ns.strip()],
        help="watch only this namespace (repeatable; env GLM_OPERATOR_WATCH_NAMESPACES, comma-separated)",
    )
    p.add_argument("--liveness", default=None, help="kopf health endpoint, e.g. http://0.0.0.0:8080/healthz")
    p.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve the operator's /metrics here, and read-only plan pages at /plans/<namespace>/<name>",
    )
    p.add_argument("--metrics-host", default="0.0.0.0")


def _add_serving_and_metrics(p: argparse.ArgumentParser) -> None:
    """The default vLLM image; Prometheus, its queries and the PodMonitors for autoscaling."""
    p.add_argument(
        "--default-image",
        default=_env("VLLM_IMAGE", DEFAULT_VLLM_IMAGE),
        help="vLLM image when spec.serving.image is empty",
    )
    p.add_argument(
        "--prometheus-url",
        default=_env("PROMETHEUS_URL"),
        help="Prometheus for autoscaling (vLLM queue metrics)",
    )
    p.add_argument(
        "--waiting-query", default=DEFAULT_WAITING_QUERY, help="PromQL template for waiting requests"
    )
    p.add_argument(
        "--running-query", default=DEFAULT_RUNNING_QUERY, help="PromQL template for running requests"
    )
    p.add_argument(
        "--kv-cache-query",
        default=DEFAULT_KV_CACHE_QUERY,
        help="PromQL template for the vllm:cache_config_info series of a model's pods (the KV-cache "
        "size vLLM reports, exported as glm_operator_reported_kv_cache_tokens)",
    )
    p.add_argument(
        "--pod-monitor",
        choices=[m.value for m in PodMonitorMode],
        default=_env("POD_MONITOR", PodMonitorMode.AUTO.value),
        help="a prometheus-operator PodMonitor per GLMDeployment, so Prometheus scrapes vLLM with the "
        "labels the autoscaler's queries use: auto = when the monitoring.coreos.com/v1 PodMonitor API "
        "exists, on = always, off = never (and prune existing ones) (env GLM_OPERATOR_POD_MONITOR)",
    )


def _add_reconciling(p: argparse.ArgumentParser) -> None:
    """Resyncs, workers, and how long replicas keep their place on nodes that are down or coming."""
    p.add_argument(
        "--resync-seconds",
        type=float,
        default=OperatorConfig.resync_seconds,
        help="every GLMDeployment is reconciled again from the cache and its children re-applied "
        "this often (repairs drift no watch event shows; watches drive everything else)",
    )
    p.add_argument(
        "--workers", type=int, default=OperatorConfig.workers, help="concurrent reconciles (I/O-bound: cheap)"
    )
    p.add_argument(
        "--node-grace-seconds",
        type=float,
        default=DEFAULT_NODE_GRACE_SECONDS,
        help="how long replicas keep their place on NotReady/Unknown GPU nodes before they are re-planned",
    )
    p.add_argument(
        "--node-groups-file",
        default=_env("NODE_GROUPS_FILE"),
        help="YAML file declaring node groups of autoscalers other than Karpenter (cluster autoscaler, "
        "GKE node auto-provisioning): nodeGroups: [{name, gpuProduct, gpusPerNode, maxNodes, nodeSelector}]",
    )
    p.add_argument(
        "--node-provisioning-grace-seconds",
        type=float,
        default=600.0,
        help="seconds a pod waiting for a node that an autoscaler launches keeps its place in the plan",
    )


def _add_leader_election_and_logging(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--leader-election",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Lease-based leader election",
    )
    p.add_argument(
        "--leader-election-namespace", default=None, help="namespace of the Lease (default: POD_NAMESPACE)"
    )
    p.add_argument(
        "--log-level",
        default=(_env("LOG_LEVEL", "info") or "info").lower(),
        choices=("debug", "info", "warning", "error"),
    )


def config_from_args(args: argparse.Namespace) -> OperatorConfig:
    extra: dict[str, Any] = {}
    if args.leader_election_namespace:
        extra["lease_namespace"] = args.leader_election_namespace
    try:  # GLMGateways: the chart's gateway values, as environment variables only
        network_policy = network_policy_settings(_env("GATEWAY_NETWORK_POLICY", "true") or "true",
                                                 _env("GATEWAY_METRICS_FROM"))  # fmt: skip
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    return OperatorConfig(
        default_image=args.default_image,
        namespaces=tuple(args.namespace),
        prometheus_url=args.prometheus_url,
        waiting_query=args.waiting_query,
        running_query=args.running_query,
        kv_cache_query=args.kv_cache_query,
        pod_monitor=PodMonitorMode(args.pod_monitor),
        resync_seconds=args.resync_seconds,
        workers=args.workers,
        node_grace_seconds=args.node_grace_seconds,
        leader_election=args.leader_election,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        node_groups=load_node_groups(args.node_groups_file),
        node_provisioning_grace_seconds=args.node_provisioning_grace_seconds,
        gateway_sync_image=_env("GATEWAY_SYNC_IMAGE", DEFAULT_SYNC_IMAGE) or DEFAULT_SYNC_IMAGE,
        gateway_network_policy=network_policy,
        **extra,
    )


def load_node_groups(path: str | None) -> dict[str, Any] | None:
    """Read and check the node-groups file; a bad file stops the operator with the reason."""
    if not path:
        return None
    import yaml

    from glm_operator.planning.supply.pools import NodeGroupsError, parse_node_groups

    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f) or {}
        if not isinstance(doc, dict):
            raise NodeGroupsError("the file must be a mapping with a nodeGroups list")
        parse_node_groups(doc)
    except (OSError, yaml.YAMLError, NodeGroupsError) as exc:
        raise SystemExit(f"--node-groups-file {path}: {exc}") from None
    return doc


def load_kube_config() -> None:
    from kubernetes import config as kube_config

    try:
        kube_config.load_incluster_config()  # type: ignore[no-untyped-call]
    except kube_config.ConfigException:
        kube_config.load_kube_config()  # type: ignore[no-untyped-call]


def run(args: argparse.Namespace) -> int:
    import asyncio

    from kubernetes import client as kube_client

    from glm_operator.clients.kube import KubeClient
    from glm_operator.clients.watches import restart_log_filter
    from glm_operator.controller import metrics
    from glm_operator.controller.clock import LoopClock
    from glm_operator.controller.leader import LeaderElector
    from glm_operator.controller.manager import Manager

    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for noisy in ("kubernetes.client.rest", "kopf.objects"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger().level))
    logging.getLogger("urllib3").setLevel(logging.ERROR)  # a failure is logged once, by the caller
    for handler in logging.getLogger().handlers:
        handler.addFilter(restart_log_filter)
    config = config_from_args(args)
    load_kube_config()
    # One HTTP connection per API thread (Manager.start sizes the pool to the workers); no hidden
    # retries: failures go back to the work queue's backoff.
    api_config = kube_client.Configuration.get_default_copy()
    api_config.connection_pool_maxsize = config.workers + 8
    api_config.retries = 0
    # The Lease gets its own connection pool, with timeouts below the renew deadline. One clock for
    # every component, the election's included; no write leaves a replica that does not lead.
    election_config = kube_client.Configuration.get_default_copy()
    election_config.connection_pool_maxsize = 2
    election_config.retries = 0
    clock = LoopClock()
    elector = None
    if config.leader_election:
        election_api = KubeClient(kube_client.ApiClient(election_config), timeout=4.0)
        elector = LeaderElector(
            election_api, config.lease_namespace, config.lease_name, config.identity, clock
        )
    api = KubeClient(
        kube_client.ApiClient(api_config),
        may_write=elector.may_write if elector is not None else None,
        on_request=metrics.count_api_request,
    )
    manager = Manager(config, api, elector, clock, liveness_endpoint=args.liveness)
    if config.metrics_port is not None:
        metrics.serve(config.metrics_port, config.metrics_host, pages=manager.pages)
    return asyncio.run(manager.run())
