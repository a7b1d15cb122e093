"""``glm-operator loadtest``: drive an OpenAI endpoint at a sweep of concurrencies, find the knee.

For a deployment behind the gateway, a Service port-forward or a vLLM pod: TTFT and ITL p50/p95
and output tokens/s per concurrency, and the concurrency beyond which throughput stops rising
while the inter-token latency climbs (the rule: :mod:`glm_operator.planning.speed.knee`).

With ``--record NAMESPACE/NAME`` the sweep is stored in a ConfigMap owned by that GLMDeployment, with
the shape and image its ``status.plan`` serves; the operator then takes the knee from it
(:mod:`glm_operator.desired.measured_speed`).

Exit codes: 0 done, 1 some requests failed, 2 bad input (or nothing to record).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
from typing import Any

from glm_operator.cli import UserError
from glm_operator.clients.openai_load import LoadTestConfig, endpoint, run_sweep
from glm_operator.planning.speed.knee import (
    DEFAULT_MIN_ITL_RISE,
    DEFAULT_MIN_THROUGHPUT_GAIN,
    Knee,
    LevelResult,
    find_knee,
)


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "loadtest",
        help="load-test an OpenAI endpoint at several concurrencies: TTFT, ITL, tokens/s and the knee",
        description=(
            "Streamed requests with fixed input/output lengths (token-id prompts and ignore_eos on "
            "/v1/completions) at each concurrency, closed loop; prints TTFT and ITL p50/p95, output "
            "tokens/s and the knee (exit 0 done, 1 some requests failed, 2 bad input)."
        ),
    )
    parser.add_argument(
        "--url", required=True, help="base URL, e.g. http://127.0.0.1:8000 (a path prefix is kept)"
    )
    parser.add_argument("--model", required=True, help="the served model name")
    parser.add_argument(
        "--concurrency", default="1,4,16", help="comma-separated levels (default %(default)s)"
    )
    parser.add_argument("--input-tokens", type=int, default=512, help="prompt length (default %(default)s)")
    parser.add_argument("--output-tokens", type=int, default=128, help="answer length (default %(default)s)")
    parser.add_argument(
        "--requests-per-worker",
        type=int,
        default=4,
        help="requests each worker sends per level: a level sends concurrency x this (default %(default)s)",
    )
    parser.add_argument(
        "--warmup-requests-per-worker",
        type=int,
        default=1,
        help=(
            "requests each worker sends first at each level, not recorded: the first wave's prompts all "
            "arrive at once (default %(default)s)"
        ),
    )
    parser.add_argument(
        "--chat", action="store_true", help="use /v1/chat/completions (text prompt of about --input-tokens)"
    )
    parser.add_argument(
        "--token-ids",
        action="store_true",
        help="ask vLLM for token ids in each chunk (return_token_ids): for a server without a tokenizer",
    )
    parser.add_argument("--api-key", default=None, help="bearer token (default: $OPENAI_API_KEY when set)")
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="seconds per request (default %(default)s)"
    )
    parser.add_argument(
        "--knee-throughput-gain",
        type=float,
        default=DEFAULT_MIN_THROUGHPUT_GAIN * 100,
        help="knee: throughput rises less than this %% to the next level (default %(default)g)",
    )
    parser.add_argument(
        "--knee-itl-rise",
        type=float,
        default=DEFAULT_MIN_ITL_RISE * 100,
        help="knee: while ITL p50 rises more than this %% (default %(default)g)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random prompts")
    parser.add_argument(
        "--record",
        metavar="NAMESPACE/NAME",
        help=(
            "after the sweep, store it in the GLMDeployment's <NAME>-loadtest ConfigMap (owned by it) with "
            "the shape and image its status.plan serves: the operator then aims the autoscaler at the "
            "measured knee (status.plan.speedSource: measured)"
        ),
    )
    parser.add_argument(
        "--record-gpu",
        metavar="GPU",
        help="with --record: the plan variant (gpuProduct) the URL reaches, when the plan runs on several",
    )
    parser.add_argument(
        "--record-replicas",
        type=int,
        default=1,
        help=(
            "with --record: replicas the URL balances over (default %(default)s: a port-forward to one "
            "pod); each level's concurrency is divided by it"
        ),
    )
    parser.add_argument("--output", "-o", choices=("table", "json"), default="table")
    parser.set_defaults(func=run)


def _concurrencies(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UserError(f"--concurrency {text!r}: give comma-separated whole numbers, e.g. 1,4,16") from None
    if not levels or any(c < 1 for c in levels):
        raise UserError(f"--concurrency {text!r}: every level must be 1 or more")
    return tuple(sorted(set(levels)))


def config_from_args(args: argparse.Namespace) -> LoadTestConfig:
    for name in ("input_tokens", "output_tokens", "requests_per_worker"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be 1 or more")
    if args.warmup_requests_per_worker < 0:
        raise UserError("--warmup-requests-per-worker must be 0 or more")
    config = LoadTestConfig(
        url=args.url,
        model=args.model,
        concurrencies=_concurrencies(args.concurrency),
        input_tokens=args.input_tokens,
        output_tokens=args.output_tokens,
        chat=args.chat,
        requests_per_worker=args.requests_per_worker,
        warmup_requests_per_worker=args.warmup_requests_per_worker,
        api_key=args.api_key if args.api_key is not None else os.environ.get("OPENAI_API_KEY", ""),
        timeout_s=args.timeout,
        seed=args.seed,
        token_ids=args.token_ids,
    )
    try:
        endpoint(config.url, config.chat)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    return config


def _ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds * 1000:.1f}"


HEADER = (
    "CONC", "REQS", "ERRORS", "TTFT P50 MS", "TTFT P95 MS", "ITL P50 MS", "ITL P95 MS",
    "OUTPUT TOK/S", "SPREAD",
)  # fmt: skip


def _spread(level: LevelResult) -> str:
    """The steady window's tokens/s spread (its halves apart), or '-' when the level had no steady window."""
    return (
        "-"
        if math.isnan(level.output_tokens_per_s_spread)
        else f"{level.output_tokens_per_s_spread * 100:.0f} %"
    )


def _row(level: LevelResult) -> tuple[str, ...]:
    return (
        str(level.concurrency),
        str(level.requests),
        str(level.errors),
        _ms(level.ttft_p50_s),
        _ms(level.ttft_p95_s),
        _ms(level.itl_p50_s),
        _ms(level.itl_p95_s),
        f"{level.output_tokens_per_s:.1f}",
        _spread(level),
    )


def table(levels: list[LevelResult], knee: Knee) -> str:
    rows = [HEADER, *(_row(level) for level in levels)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines += [f"error at {lv.concurrency}: {lv.first_error}" for lv in levels if lv.errors]
    where = f"concurrency {knee.concurrency}" if knee.concurrency is not None else "none"
    lines.append(f"knee: {where} ({knee.reason})")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    # the record path needs the kubernetes client: imported only with --record, so the load test runs where
    # only the HTTP side is installed (the GPU device's harness, a laptop against any endpoint)
    target = None
    if args.record:
        from glm_operator.commands import loadtest_record

        target = loadtest_record.record_target(args)
    gain, rise = args.knee_throughput_gain / 100, args.knee_itl_rise / 100

    def progress(level: LevelResult) -> None:
        if args.output == "table":
            print(
                f"concurrency {level.concurrency}: {level.requests} requests, "
                f"{level.output_tokens_per_s:.1f} output tok/s",
                file=sys.stderr,
                flush=True,
            )

    levels = asyncio.run(run_sweep(config, progress))
    knee = find_knee(levels, gain, rise)
    if args.output == "json":
        print(
            json.dumps(
                {
                    "url": config.url,
                    "model": config.model,
                    "input_tokens": config.input_tokens,
                    "output_tokens": config.output_tokens,
                    "endpoint": endpoint(config.url, config.chat).path,
                    "requests_per_worker": config.requests_per_worker,
                    "warmup_requests_per_worker": config.warmup_requests_per_worker,
                    "knee_rule": {"min_throughput_gain": gain, "min_itl_rise": rise},
                    "levels": [level.to_dict() for level in levels],
                    "knee": knee.to_dict(),
                },
                indent=2,
            )
        )
    else:
        print(table(levels, knee))
    if target is not None:
        from glm_operator.commands import loadtest_record

        loadtest_record.record(target, args, config, levels)
    return 1 if any(level.errors for level in levels) else 0
