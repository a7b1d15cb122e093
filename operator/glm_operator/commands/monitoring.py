"""``glm-operator monitoring``: write the chart's alert rules and dashboards (hack/generate.sh)."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "monitoring",
        help="print the Prometheus alert rules of the chart",
        description=(
            "Print the Prometheus rule file of the chart's PrometheusRule (charts/glm-operator/"
            "monitoring/alerts.yaml); promtool check rules reads the same file."
        ),
    )
    parser.add_argument("what", choices=("alerts",), help="alerts: the rule file (YAML) on stdout")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from glm_operator.monitoring import alerts

    sys.stdout.write(alerts.rule_file())
    return 0
