"""``glm-operator crd``: print the GLMDeployment CustomResourceDefinition generated from the models."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from glm_operator.api import crd
from glm_operator.api.gateway import GATEWAY_KIND
from glm_operator.api.v1alpha1 import KIND


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "crd",
        help="print the GLMDeployment (or GLMGateway) CustomResourceDefinition",
        description=(
            "Print the GLMDeployment CustomResourceDefinition (apiextensions.k8s.io/v1) generated from "
            "the pydantic models; pipe it to `kubectl apply -f -`."
        ),
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=("yaml", "json", "helm"),
        default="yaml",
        help="yaml (default), json, or helm (the chart's templates/crd.yaml)",
    )
    parser.add_argument(
        "--kind",
        choices=(KIND, GATEWAY_KIND),
        default=KIND,
        help="which CustomResourceDefinition (default GLMDeployment)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    document = crd.build_gateway_crd() if getattr(args, "kind", None) == GATEWAY_KIND else crd.build_crd()
    if args.output == "json":
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    elif args.output == "helm":
        sys.stdout.write(crd.chart_crd_template(document))
    else:
        sys.stdout.write(crd.crd_yaml(document))
    return 0
