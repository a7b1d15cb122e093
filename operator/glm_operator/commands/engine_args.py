"""``--image`` / ``--vllm-version`` of the offline commands: which vLLM release's memory rules apply."""

from __future__ import annotations

import argparse

from glm_operator.catalog.vllm import DEFAULT_VLLM_IMAGE
from glm_operator.cli import UserError
from glm_operator.planning.releases import (
    VllmEngine,
    engine_for_image,
    engine_for_version,
    unsupported_release,
)


def add_engine_arguments(parser: argparse.ArgumentParser, image_help: str = "") -> None:
    """``--image`` / ``--vllm-version``: the vLLM release whose memory-budget rules apply."""
    engine = parser.add_mutually_exclusive_group()
    engine.add_argument(
        "--image",
        default=DEFAULT_VLLM_IMAGE,
        help=image_help
        or f"vLLM image the instance runs; its tag gives the release (default {DEFAULT_VLLM_IMAGE})",
    )
    engine.add_argument(
        "--vllm-version",
        default=None,
        help="vLLM release instead of an image (0.33.0; >= 0.20 counts CUDA-graph memory in the KV budget)",
    )


def engine_from_args(args: argparse.Namespace) -> VllmEngine:
    if args.vllm_version:
        try:
            engine = engine_for_version(args.vllm_version)
        except ValueError:
            raise UserError(f"--vllm-version {args.vllm_version!r}: give a release such as 0.33.0") from None
        flag = "--vllm-version"
    else:
        engine, flag = engine_for_image(args.image), "--image"
    unsupported = unsupported_release(engine.version)
    if unsupported:
        raise UserError(f"{flag}: {unsupported}")
    return engine
