"""``glm-operator monitoring``: write the chart's alert rules and dashboards (hack/generate.sh)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "monitoring",
        help="print the chart's Prometheus alert rules, or write its Grafana dashboards",
        description=(
            "alerts: print the Prometheus rule file of the chart's PrometheusRule (charts/glm-operator/"
            "monitoring/alerts.yaml). dashboards: write one Grafana dashboard JSON per view into "
            "--out-dir (charts/glm-operator/monitoring/dashboards; needs grafana-foundation-sdk, "
            "in the test extra)."
        ),
    )
    parser.add_argument("what", choices=("alerts", "dashboards"))
    parser.add_argument("--out-dir", default=None, help="dashboards: the directory to write them to")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from glm_operator.cli import UserError

    if args.what == "alerts":
        from glm_operator.monitoring import alerts

        sys.stdout.write(alerts.rule_file())
        return 0
    if not args.out_dir:
        raise UserError("dashboards: --out-dir is required")
    try:
        from glm_operator.monitoring import dashboards
    except ModuleNotFoundError as exc:
        raise UserError(f"{exc.name} is missing: pip install -e '.[test]'") from exc
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.json"):
        stale.unlink()
    for name, text in dashboards.dashboard_files().items():
        (out / name).write_text(text)
    return 0
