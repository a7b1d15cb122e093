"""``glm-operator plan``: place a GLMDeployment on a node list, offline.

Exit codes: 0 planned, 1 nothing fits, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from glm_operator.api.v1alpha1 import KIND, spec_from_dict
from glm_operator.catalog.models import CatalogError
from glm_operator.cli import UserError
from glm_operator.commands.engine_args import add_engine_arguments, engine_from_args
from glm_operator.planning.memory.instance import FitInputError
from glm_operator.planning.placement.alternatives import rank_precisions
from glm_operator.planning.placement.plan import plan_placement
from glm_operator.planning.placement.request import (
    PlacementRequest,
    PlanningInputError,
    placement_request_from_spec,
)
from glm_operator.planning.placement.result import Plan
from glm_operator.planning.supply.nodes import parse_gpu_pools


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "plan",
        help="plan a GLMDeployment against a node list (kubectl get nodes -o yaml)",
        description=(
            "Choose GPU types, TP/PP, quantization and replicas offline "
            "(exit 0 planned, 1 no fit, 2 bad input)."
        ),
    )
    parser.add_argument("-f", "--filename", required=True, help="GLMDeployment YAML")
    parser.add_argument(
        "--nodes",
        default=None,
        help="Node list YAML/JSON (kubectl get nodes -o yaml); default: the current kubeconfig's nodes",
    )
    add_engine_arguments(
        parser,
        "the operator's vLLM image (its --default-image), used when spec.serving.image is not set; the "
        "image's tag gives the release whose memory rules the plan follows (default %(default)s)",
    )
    parser.add_argument(
        "--output",
        "-o",
        choices=("table", "json", "html"),
        default="table",
        help="html: one self-contained page (memory budget per GPU type, rejected types and their "
        "fixes), e.g. > plan.html",
    )
    parser.set_defaults(func=run)


def _load_documents(path: str, what: str) -> list[Any]:
    file = Path(path)
    if not file.is_file():
        raise UserError(f"{what} {path}: file not found")
    try:
        return [d for d in yaml.safe_load_all(file.read_text(encoding="utf-8")) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise UserError(f"{what} {path}: malformed YAML{where}") from None


def _deployment(path: str) -> Mapping[str, Any]:
    docs = _load_documents(path, "-f")
    for doc in docs:
        if isinstance(doc, Mapping) and doc.get("kind") in (None, KIND):
            if not isinstance(doc.get("spec"), Mapping):
                raise UserError(f"-f {path}: the GLMDeployment has no spec mapping")
            return doc
    raise UserError(f"-f {path}: no GLMDeployment document found")


def _deployment_spec(path: str) -> Mapping[str, Any]:
    spec: Mapping[str, Any] = _deployment(path)["spec"]
    return spec


def _title(path: str) -> str:
    """The page's title: the GLMDeployment's namespace/name as the file gives them, else the file."""
    metadata = _deployment(path).get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if not name:
        return Path(path).name
    namespace = metadata.get("namespace") if isinstance(metadata, Mapping) else None
    return f"{namespace}/{name}" if namespace else str(name)


def _nodes(path: str) -> list[Mapping[str, Any]]:
    nodes: list[Mapping[str, Any]] = []
    for doc in _load_documents(path, "--nodes"):
        if not isinstance(doc, Mapping):
            continue
        if doc.get("kind") == "Node":
            nodes.append(doc)
        elif isinstance(doc.get("items"), list):
            nodes.extend(
                i for i in doc["items"] if isinstance(i, Mapping) and i.get("kind", "Node") == "Node"
            )
    return nodes


def _cluster_nodes() -> list[Mapping[str, Any]]:
    """Nodes of the cluster the current kubeconfig points at (read-only: one list call)."""
    from kubernetes.config import ConfigException

    from glm_operator.clients.kube import KubeClient
    from glm_operator.commands.run import load_kube_config

    try:
        load_kube_config()
        return list(KubeClient().list("v1", "Node"))
    except (ConfigException, OSError) as exc:
        raise UserError(f"--nodes not given and no cluster reachable through the kubeconfig: {exc}") from None


def _validated_spec(spec: Mapping[str, Any], path: str) -> dict[str, Any]:
    """The spec as the apiserver and the operator see it: validated, with the API's defaults."""
    try:
        return spec_from_dict(spec).model_dump(by_alias=True, exclude_none=True)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = "spec." + ".".join(str(p) for p in first.get("loc", ()))
        raise UserError(f"-f {path}: {where}: {first.get('msg')}") from None


def make_request(args: argparse.Namespace) -> PlacementRequest:
    spec = _validated_spec(_deployment_spec(args.filename), args.filename)
    pools = parse_gpu_pools(_nodes(args.nodes) if args.nodes else _cluster_nodes())
    default_image = engine_from_args(args).image
    try:
        return placement_request_from_spec(spec, pools, default_image)
    except (CatalogError, PlanningInputError, FitInputError) as exc:
        raise UserError(str(exc)) from None


def make_plan(args: argparse.Namespace, request: PlacementRequest | None = None) -> Plan:
    try:
        return plan_placement(request or make_request(args))
    except (CatalogError, PlanningInputError, FitInputError) as exc:
        raise UserError(str(exc)) from None


def _table(plan: Plan) -> str:
    header = (
        "GPU",
        "RESOURCE",
        "TP",
        "PP",
        "GPUS",
        "QUANT",
        "WEIGHTS/GPU",
        "KV/GPU",
        "KV TOKENS",
        "CONC",
        "SEQS",
        "REPLICAS",
        "CAPACITY",
        "CHECKPOINT",
    )
    rows = [header]
    for v in plan.variants:
        rows.append(
            (
                v.gpu_product,
                v.resource_name,
                str(v.tensor_parallel_size),
                str(v.pipeline_parallel_size),
                str(v.gpus_per_replica),
                v.quantization,
                f"{v.weights_gib_per_gpu:.1f} GiB",
                f"{v.available_kv_cache_gib_per_gpu:.1f} GiB",
                str(v.kv_cache_tokens),
                f"{v.max_concurrency:.2f}",
                str(v.max_num_seqs),
                str(v.replicas),
                str(v.capacity_replicas),
                v.model_id + (f" (--quantization {v.quantization_flag})" if v.quantization_flag else ""),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = [
        f"model {plan.model_id}, context {plan.context_length}: "
        + ("planned" if plan.fits else "DOES NOT FIT")
        + f", replicas {plan.replicas_planned}/{plan.replicas_requested}"
        + (f" (shortfall {plan.shortfall_replicas})" if plan.shortfall_replicas else ""),
        f"licence: {plan.license or 'not in the catalog: read the model card'}",
    ]
    if plan.variants:
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    for v in plan.variants:
        if v.speed is not None:
            w = v.speed.workload
            lines.append(
                f"predicted {v.gpu_product}: {v.speed.output_tokens_per_s:.0f} output tokens/s per replica "
                f"({v.speed.output_tokens_per_s_per_gpu:.0f} per GPU), ITL {1000 * v.speed.itl_s:.1f} ms, "
                f"TTFT {1000 * v.speed.ttft_s:.0f} ms at {w.concurrency} concurrent "
                f"{w.input_tokens}->{w.output_tokens}-token requests (model calibrated on H200 load tests); "
                f"knee at {v.knee_concurrency} concurrent (the autoscaler's target per replica)"
            )
        if v.considered:
            lines.append(
                f"shapes compared on {v.gpu_product}, best first (predicted at each one's max-num-seqs):"
            )
            width = max(len(c.shape) for c in v.considered)
            for c in v.considered:
                why = "served" if c.chosen else c.lost
                lines.append(
                    f"  {'*' if c.chosen else ' '} {c.shape.ljust(width)}  {c.gpus} GPUs  "
                    f"{c.max_concurrency:.1f} sequences  max-num-seqs {c.max_num_seqs}  "
                    f"{c.tokens_per_s_per_gpu:.0f} tokens/s per GPU"
                    + ("" if c.meets_slo else " (misses spec.slo)")
                    + (" (simplest fit)" if c.first_fit else "")
                    + f"  {why}"
                )
        lines += [f"note {v.gpu_product}: {n}" for n in v.notes]
    for r in plan.rejected:
        lines.append(f"rejected {r.gpu_product}: {r.reason}")
    for i, f in enumerate(plan.fixes, 1):
        lines.append(f"fix {i}{' (cheapest)' if i == 1 else ''}: {f.describe()}")
    lines += [f"- {d}" for d in plan.details]
    lines += [f"! {u}" for u in plan.uncertain]
    return "\n".join(lines)


def _ranking(plan: Plan, request: PlacementRequest) -> list[str]:
    """Each precision that plans, pinned, ranked by predicted output tokens/s per GPU (auto compares only
    bf16 with native fp8; this also says what int8/int4 or a pinned precision would buy)."""
    chosen = next((v for v in plan.variants if v.replicas > 0), None)
    lines = []
    for i, alt in enumerate(rank_precisions(request), 1):
        v = alt.variant
        mark = " (planned)" if chosen is not None and alt.quantization == chosen.quantization else ""
        shape = next(
            (c.shape for c in v.considered if c.chosen),
            f"{alt.quantization} TP={v.tensor_parallel_size}"
            + (f" PP={v.pipeline_parallel_size}" if v.pipeline_parallel_size > 1 else ""),
        )
        lines.append(
            f"rank {i}{mark}: {shape} on {v.gpu_product}, max-num-seqs {v.max_num_seqs}: "
            + (
                f"{alt.tokens_per_s_per_gpu:.0f} output tokens/s per GPU predicted"
                if v.speed
                else "no prediction"
            )
        )
    return lines


def run(args: argparse.Namespace) -> int:
    request = make_request(args)
    plan = make_plan(args, request)
    if args.output == "json":
        print(json.dumps(plan.to_dict(), indent=2))
    elif args.output == "html":
        from glm_operator.render.plan_page import render_plan_page

        print(render_plan_page(plan, title=_title(args.filename)), end="")
    else:
        print(_table(plan))
        if plan.fits:
            print("\n".join(_ranking(plan, request)))
    return 0 if plan.fits else 1
