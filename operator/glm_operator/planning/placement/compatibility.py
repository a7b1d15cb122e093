"""Does the vLLM image serve the model? A pure check of the image tag against the catalog.

``check_image(image, model)`` gives an error for a release older than the model's first or than the
oldest the memory plan covers (the pod would fail at model load, so nothing is created), a warning where
the tag is no version or the architecture is unknown to the catalog. docs/planning.md ("Does the image
serve the model?").
"""

from __future__ import annotations

from dataclasses import dataclass

from glm_operator.catalog.models import CatalogError, ResolvedModel, resolve_model
from glm_operator.catalog.vllm import DEFAULT_VLLM_IMAGE, format_version, image_version
from glm_operator.planning.placement.request import PlacementRequest
from glm_operator.planning.releases import OLDEST_SUPPORTED, unsupported_release


@dataclass(frozen=True)
class ImageCheck:
    error: str | None = None
    warning: str | None = None


def check_image(image: str, model: ResolvedModel) -> ImageCheck:
    defaults = model.serving_defaults
    arch = defaults.architecture or "(no architectures in config.json)"
    if defaults.min_version is None:
        return ImageCheck(
            warning=f"architecture {arch} of {model.name} is not in the catalog's vLLM table: "
            f"check that image {image} serves it"
        )
    minimum = format_version(defaults.min_version)
    version = image_version(image)
    if version is None:
        return ImageCheck(
            warning=f"image {image} has no version tag: {model.name} ({arch}) needs vLLM {minimum} or "
            f"newer; the operator cannot check this one (default {DEFAULT_VLLM_IMAGE})"
        )
    if version < defaults.min_version:
        return ImageCheck(
            error=f"image {image} is vLLM {format_version(version)}, but {model.name} ({arch}) needs vLLM "
            f"{minimum} or newer. Fix: set spec.serving.image to a vLLM {minimum}+ image such as "
            f"{DEFAULT_VLLM_IMAGE}, or remove it to use the operator's default"
        )
    unsupported = unsupported_release(version)
    if unsupported:
        return ImageCheck(
            error=f"image {image}: {unsupported}. Fix: set spec.serving.image to a vLLM "
            f"{format_version(OLDEST_SUPPORTED)}+ image such as {DEFAULT_VLLM_IMAGE}, or remove it to use "
            "the operator's default"
        )
    return ImageCheck()


def request_model(request: PlacementRequest) -> ResolvedModel | None:
    """The model a placement request names (catalog id or inline config); None when invalid."""
    try:
        if request.model_config:
            return resolve_model(request.model_config, request.model or None)
        return resolve_model(request.model)
    except CatalogError:
        return None  # the planner reports a bad model itself


def check_request_image(image: str, request: PlacementRequest) -> ImageCheck:
    """``check_image`` for the model a placement request names."""
    model = request_model(request)
    return ImageCheck() if model is None else check_image(image, model)
