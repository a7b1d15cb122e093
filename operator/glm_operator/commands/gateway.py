"""``glm-operator gateway``: the GLMGateway's sync sidecar, and its objects printed offline.

``gateway sync`` runs in the gateway pod (from the operator image) next to HAProxy: it watches
the namespace's GLMDeployments, vLLM Pods and its GLMGateway and keeps HAProxy in step (see
``glm_operator.gateway.sync``). ``gateway render -f gateway.yaml`` prints the objects the
operator creates for a GLMGateway.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from glm_operator.controller.config import DEFAULT_SYNC_IMAGE
from glm_operator.gateway.haproxy_config import HTTP_PORT, PEERS_PORT, PROXY_METRICS_PORT, key_table_name


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("gateway", help="the GLMGateway's proxy sync and objects")
    commands = parser.add_subparsers(dest="gateway_command", metavar="COMMAND", required=True)

    sync = commands.add_parser(
        "sync",
        help="keep HAProxy in step with the namespace's GLMDeployments and Pods (gateway sidecar)",
        description="Watch GLMDeployments, vLLM Pods and the GLMGateway; write HAProxy's files and drive it.",
    )
    sync.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE"), help="namespace to serve")
    sync.add_argument("--gateway", required=True, help="name of the GLMGateway")
    sync.add_argument("--config-dir", required=True, help="where haproxy.cfg and the sockets live")
    sync.add_argument("--keys-file", default=None, help="mounted API-key map ('<key> <client>' per line)")
    sync.add_argument("--port", type=int, default=HTTP_PORT, help="HAProxy's OpenAI port")
    sync.add_argument("--bind-address", default="0.0.0.0", help="HAProxy's listen address")
    sync.add_argument(
        "--proxy-metrics-port",
        type=int,
        default=PROXY_METRICS_PORT,
        help="HAProxy's Prometheus port (0: off)",
    )
    sync.add_argument("--master-socket", default=None, help="HAProxy master CLI socket (reloads)")
    sync.add_argument("--metrics-port", type=int, default=None, help="serve per-key counters here")
    sync.add_argument("--metrics-host", default="0.0.0.0")
    sync.add_argument(
        "--pod-name",
        default=os.environ.get("POD_NAME"),
        help="this gateway pod (default $POD_NAME); with --pod-ip, the replicas share the per-key limits",
    )
    sync.add_argument(
        "--pod-ip", default=os.environ.get("POD_IP"), help="this pod's address (default $POD_IP)"
    )
    sync.add_argument("--peers-port", type=int, default=PEERS_PORT, help="HAProxy peers port")
    sync.add_argument("--once", action="store_true", help="write the first configuration and exit")
    sync.add_argument("--address-map", default=None, help=argparse.SUPPRESS)  # tests: pod IP -> loopback
    sync.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    sync.set_defaults(func=run_sync)

    render = commands.add_parser(
        "render", help="print the objects the operator creates for a GLMGateway (YAML)"
    )
    render.add_argument("-f", "--filename", required=True, help="GLMGateway YAML ('-' for stdin)")
    render.add_argument("--sync-image", default=DEFAULT_SYNC_IMAGE, help="image of the sync sidecar")
    render.set_defaults(func=run_render)


def key_metrics(runtime: Any, table: str = "per_key") -> Any:
    """A Prometheus collector reading the proxy's per-key stick table on each scrape (this
    replica's own: with peers, the others' copies are theirs to export)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    class KeyCollector:
        def collect(self) -> Iterator[Any]:
            requests = CounterMetricFamily(
                "glm_gateway_client_requests", "Requests per API client.", labels=["client"]
            )
            rejected = CounterMetricFamily(
                "glm_gateway_client_rejected_requests",
                "Requests refused with 429 per API client.",
                labels=["client"],
            )
            in_flight = GaugeMetricFamily(
                "glm_gateway_client_requests_in_flight",
                "Requests in flight per API client.",
                labels=["client"],
            )
            rate = GaugeMetricFamily(
                "glm_gateway_client_requests_per_minute",
                "Requests started in the last minute per API client.",
                labels=["client"],
            )
            tokens = CounterMetricFamily(
                "glm_gateway_client_tokens",
                "Tokens (prompt + completion, from the answers' usage) per API client; counted only "
                "under a tokens-per-minute limit (spec.limits.tokensPerMinute).",
                labels=["client"],
            )
            tokens_rate = GaugeMetricFamily(
                "glm_gateway_client_tokens_per_minute",
                "Tokens of the answers that ended in the last minute per API client (this replica's).",
                labels=["client"],
            )
            try:
                entries = runtime.key_counters(table)
            except OSError:
                entries = []
            for entry in entries:
                requests.add_metric([entry.client], entry.requests_total)
                rejected.add_metric([entry.client], entry.rejected_total)
                in_flight.add_metric([entry.client], entry.concurrent_requests)
                rate.add_metric([entry.client], entry.request_rate_per_minute)
                tokens.add_metric([entry.client], entry.tokens_total)
                tokens_rate.add_metric([entry.client], entry.tokens_per_minute)
            yield from (requests, rejected, in_flight, rate, tokens, tokens_rate)

    return KeyCollector()


def run_sync(args: argparse.Namespace) -> int:
    from glm_operator.cli import UserError
    from glm_operator.clients.haproxy import HAProxyRuntime
    from glm_operator.commands.run import load_kube_config
    from glm_operator.gateway.sync import GatewaySync, SyncOptions

    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from glm_operator.clients.watches import restart_log_filter

    for handler in logging.getLogger().handlers:
        handler.addFilter(restart_log_filter)
    if not args.namespace:
        raise UserError("--namespace is required (or set POD_NAMESPACE)")
    options = SyncOptions(
        namespace=args.namespace,
        gateway=args.gateway,
        config_dir=args.config_dir,
        keys_file=args.keys_file,
        port=args.port,
        bind_address=args.bind_address,
        proxy_metrics_port=args.proxy_metrics_port or None,
        master_socket=args.master_socket,
        address_map=args.address_map,
        pod_name=args.pod_name,
        pod_ip=args.pod_ip,
        peers_port=args.peers_port,
    )
    runtime = None
    if not args.once:
        runtime = HAProxyRuntime(str(Path(args.config_dir) / "admin.sock"), args.master_socket)
    load_kube_config()
    from kubernetes import client as k8s

    if args.metrics_port is not None and runtime is not None:
        from prometheus_client import REGISTRY, start_http_server

        peered = options.pod_name if options.pod_name and options.pod_ip else None
        REGISTRY.register(key_metrics(runtime, key_table_name(peered)))
        start_http_server(args.metrics_port, args.metrics_host)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    return GatewaySync(options, runtime).run(k8s.ApiClient(), stop, once=args.once)


def run_render(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from glm_operator.api.gateway import GLMGatewaySpec
    from glm_operator.cli import UserError
    from glm_operator.gateway.objects import render_gateway

    text = sys.stdin.read() if args.filename == "-" else Path(args.filename).read_text()
    body = yaml.safe_load(text) or {}
    try:
        spec = GLMGatewaySpec.model_validate(body.get("spec") or {})
    except ValidationError as err:
        raise UserError(f"invalid GLMGateway spec: {err}") from err
    body.setdefault("metadata", {}).setdefault("namespace", "default")
    body["metadata"].setdefault("uid", "00000000-0000-0000-0000-000000000000")
    for obj in render_gateway(body, spec, args.sync_image):
        sys.stdout.write("---\n" + yaml.safe_dump(obj, sort_keys=False))
    return 0
