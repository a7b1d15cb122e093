"""``python -m devtools``: regenerate the committed artifacts (run from the repository root).

    python -m devtools crd [-o yaml|json|helm] [--kind GLMDeployment|GLMGateway]
    python -m devtools monitoring alerts
    python -m devtools monitoring dashboards --out-dir DIR
    python -m devtools vllm-flags [--check]

Errors a user can fix are one line, and a reader that goes away ends a command quietly, as with
``glm-operator`` (``glm_operator.cli.dispatch``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from devtools import alerts, crd, vllm_flags
from glm_operator.api.gateway import GATEWAY_KIND
from glm_operator.api.v1alpha1 import KIND
from glm_operator.cli import UserError, dispatch


def print_crd(args: argparse.Namespace) -> int:
    document = crd.build_gateway_crd() if args.kind == GATEWAY_KIND else crd.build_crd()
    if args.output == "json":
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    elif args.output == "helm":
        sys.stdout.write(crd.chart_crd_template(document))
    else:
        sys.stdout.write(crd.crd_yaml(document))
    return 0


def write_monitoring(args: argparse.Namespace) -> int:
    if args.what == "alerts":
        sys.stdout.write(alerts.rule_file())
        return 0
    if not args.out_dir:
        raise UserError("dashboards: --out-dir is required")
    try:
        from devtools import dashboards  # grafana-foundation-sdk: the test extra
    except ModuleNotFoundError as exc:
        raise UserError(f"{exc.name} is missing: pip install -e '.[test]'") from exc
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.json"):
        stale.unlink()
    for name, text in dashboards.dashboard_files().items():
        (out / name).write_text(text)
    return 0


def write_vllm_flags(args: argparse.Namespace) -> int:
    return vllm_flags.regenerate(check=args.check)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m devtools",
        description="Regenerate the artifacts the repository commits (hack/generate.sh, make vllm-flags).",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    crd_parser = commands.add_parser(
        "crd",
        help="print the GLMDeployment (or GLMGateway) CustomResourceDefinition",
        description=(
            "Print the GLMDeployment CustomResourceDefinition (apiextensions.k8s.io/v1) generated from "
            "the pydantic models; pipe it to `kubectl apply -f -`."
        ),
    )
    crd_parser.add_argument(
        "-o",
        "--output",
        choices=("yaml", "json", "helm"),
        default="yaml",
        help="yaml (default), json, or helm (the chart's templates/crd.yaml)",
    )
    crd_parser.add_argument(
        "--kind",
        choices=(KIND, GATEWAY_KIND),
        default=KIND,
        help="which CustomResourceDefinition (default GLMDeployment)",
    )
    crd_parser.set_defaults(func=print_crd)

    monitoring_parser = commands.add_parser(
        "monitoring",
        help="print the chart's Prometheus alert rules, or write its Grafana dashboards",
        description=(
            "alerts: print the Prometheus rule file of the chart's PrometheusRule (charts/glm-operator/"
            "monitoring/alerts.yaml). dashboards: write one Grafana dashboard JSON per view into "
            "--out-dir (charts/glm-operator/monitoring/dashboards; needs grafana-foundation-sdk, "
            "in the test extra)."
        ),
    )
    monitoring_parser.add_argument("what", choices=("alerts", "dashboards"))
    monitoring_parser.add_argument(
        "--out-dir", default=None, help="dashboards: the directory to write them to"
    )
    monitoring_parser.set_defaults(func=write_monitoring)

    flags_parser = commands.add_parser(
        "vllm-flags", help="regenerate the extraArgs guard's flag list from vLLM's own parser"
    )
    flags_parser.add_argument("--check", action="store_true", help="fail if the committed list differs")
    flags_parser.set_defaults(func=write_vllm_flags)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return dispatch(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
