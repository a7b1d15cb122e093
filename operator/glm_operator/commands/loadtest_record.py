"""``glm-operator loadtest --record NAMESPACE/NAME``: the sweep into the GLMDeployment's ConfigMap.

Apart from :mod:`glm_operator.commands.loadtest` because it needs the kubernetes client, which the load test
itself does not: ``loadtest`` imports this module only when ``--record`` is given.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from dataclasses import dataclass
from typing import Any

from glm_operator.cli import UserError
from glm_operator.clients.kube import KubeClient
from glm_operator.clients.load_tests import read_glmdeployment, record_load_test
from glm_operator.clients.openai_load import LoadTestConfig
from glm_operator.planning.speed.knee import LevelResult
from glm_operator.planning.speed.measured import Measurement, measurement_to_data, shape_from_status
from glm_operator.planning.supply.outages import format_time


@dataclass(frozen=True)
class RecordTarget:
    """The GLMDeployment ``--record`` names, the plan variant the URL reaches and its image."""

    api: KubeClient
    glmdeployment: dict[str, Any]
    variant: dict[str, Any]
    image: str


def record_target(args: argparse.Namespace) -> RecordTarget:
    """Read the GLMDeployment before the sweep: a typo is refused before minutes of load."""
    from glm_operator.commands.run import load_kube_config

    namespace, _, name = str(args.record).partition("/")
    if not namespace or not name or "/" in name:
        raise UserError(f"--record {args.record!r}: give NAMESPACE/NAME of a GLMDeployment")
    if args.record_replicas < 1:
        raise UserError("--record-replicas must be 1 or more")
    try:
        load_kube_config()
        api = KubeClient()
        found = read_glmdeployment(api, namespace, name)
    except Exception as exc:  # no kubeconfig, apiserver unreachable, forbidden
        raise UserError(f"--record {args.record}: cannot read the GLMDeployment ({exc})") from None
    if found is None:
        raise UserError(
            f"--record {args.record}: no GLMDeployment {name} in namespace {namespace}; fix: name an "
            "existing one (kubectl get glmdeployments -A)"
        )
    plan = (found.get("status") or {}).get("plan") or {}
    variants = list(plan.get("variants") or [])
    if args.record_gpu:
        serving = [v for v in variants if v.get("gpuProduct") == args.record_gpu]
    else:
        serving = [v for v in variants if v.get("replicas")]
    if not variants:
        raise UserError(
            f"--record {args.record}: its status.plan has no variant yet; fix: wait for Planned=True "
            "(kubectl get glmdeployment) and load-test a Ready replica"
        )
    if len(serving) != 1:
        products = ", ".join(str(v.get("gpuProduct")) for v in variants)
        why = f"--record-gpu {args.record_gpu} is none of them" if args.record_gpu else "name one"
        raise UserError(
            f"--record {args.record}: its plan serves {products}: {why} with --record-gpu (the GPU type "
            "the URL reaches)"
        )
    return RecordTarget(api, found, serving[0], str(plan.get("image") or ""))


def record(
    target: RecordTarget, args: argparse.Namespace, config: LoadTestConfig, levels: list[LevelResult]
) -> None:
    """Write the sweep into the GLMDeployment's ConfigMap; refuse a sweep with no level without errors."""
    meta = target.glmdeployment["metadata"]
    if all(level.errors for level in levels):
        first = next((lv.first_error for lv in levels if lv.first_error), "")
        raise UserError(
            f"--record {args.record}: every level had failed requests ({first}); nothing recorded. Fix: "
            "check --url and --model against the deployment (status.model is the served name), then run again"
        )
    measurement = Measurement(
        levels=tuple(levels),
        input_tokens=config.input_tokens,
        output_tokens=config.output_tokens,
        shape=shape_from_status(target.variant, target.image),
        recorded_at=format_time(dt.datetime.now(dt.UTC)),
        replicas=args.record_replicas,
        max_num_seqs=int(target.variant.get("maxNumSeqs") or 0),
        url=config.url,
        model=config.model,
    )
    try:
        written = record_load_test(target.api, target.glmdeployment, measurement_to_data(measurement))
    except Exception as exc:
        raise UserError(f"--record {args.record}: the ConfigMap was not written ({exc})") from None
    print(
        f"recorded in ConfigMap {meta['namespace']}/{written['metadata']['name']} "
        f"({measurement.shape.describe()}); the operator reports its use in status.plan.speedSource",
        file=sys.stderr,
    )
