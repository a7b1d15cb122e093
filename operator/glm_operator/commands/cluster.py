"""``glm-operator cluster up|down|status``: the local simulated GPU cluster for development."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from glm_operator.cli import UserError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "cluster",
        help="start/stop the local control plane with simulated GPU nodes (development)",
        description="Run etcd, kube-apiserver, controller-manager, scheduler and KWOK on loopback.",
    )
    parser.add_argument("action", choices=("up", "down", "status"))
    parser.add_argument(
        "--nodes",
        action="append",
        type=Path,
        default=None,
        help="node list YAML to apply (repeatable; default tests/fixtures/gpu-cluster.yaml)",
    )
    parser.add_argument("--state-dir", type=Path, default=None, help="where state, logs and kubeconfig live")
    parser.add_argument(
        "--no-lws",
        dest="lws",
        action="store_false",
        help="do not start the LeaderWorkerSet controller (multi-node replicas then stay unplaced)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from glm_operator.testing.cluster import ClusterError, LocalCluster, default_state_dir, repo_root

    cluster = LocalCluster(state_dir=args.state_dir or default_state_dir())
    try:
        if args.action == "down":
            cluster.down()
            print("cluster stopped")
            return 0
        if args.action == "status":
            running = cluster.is_running()
            print(f"running: {running}\nkubeconfig: {cluster.kubeconfig}")
            if running:
                print(cluster.kubectl("get", "nodes", "-L", "nvidia.com/gpu.product").stdout, end="")
            return 0 if running else 1
        nodes = args.nodes or [repo_root() / "tests" / "fixtures" / "gpu-cluster.yaml"]
        t0 = time.monotonic()
        started = cluster.up(nodes=nodes)
        verb = "started" if started else "already running"
        print(f"cluster {verb} in {time.monotonic() - t0:.1f}s; export KUBECONFIG={cluster.kubeconfig}")
        if args.lws:
            from glm_operator.testing.lws import LeaderWorkerSetController

            t0 = time.monotonic()
            lws_started = LeaderWorkerSetController(cluster).up()
            verb = "started" if lws_started else "already running"
            print(f"LeaderWorkerSet controller {verb} in {time.monotonic() - t0:.1f}s")
        return 0
    except ClusterError as exc:
        raise UserError(str(exc)) from exc
