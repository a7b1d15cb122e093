"""``python -m tests.harness.local_cluster up|down|status``: the local simulated GPU cluster.

What ``make cluster`` and ``make cluster-down`` run. It is development tooling, not part of the
operator: the package and its image carry no test bed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tests.harness import inference_extension
from tests.harness.cluster import ClusterError, LocalCluster, default_state_dir, repo_root
from tests.harness.lws import LeaderWorkerSetController


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tests.harness.local_cluster",
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
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
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
            t0 = time.monotonic()
            lws_started = LeaderWorkerSetController(cluster).up()
            verb = "started" if lws_started else "already running"
            print(f"LeaderWorkerSet controller {verb} in {time.monotonic() - t0:.1f}s")
        inference_extension.install_crd(cluster)
        print("InferencePool CRD (Gateway API Inference Extension) installed")
        return 0
    except ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
