"""Apply the objects of one GLMGateway (a separate, small step next to the GLMDeployment reconcile).

Rendering is pure (``glm_operator.gateway.objects``); this applies the result with server-side
apply and records ``status.observedGeneration`` and the Service name. An invalid spec (which the
CRD schema normally rejects first) becomes a Warning Event naming the field, never an exception.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from glm_operator.api.gateway import GATEWAY_KIND, GLMGatewaySpec
from glm_operator.clients.kube import API_VERSION, KubeClient, object_path
from glm_operator.gateway.objects import gateway_name, render_gateway

log = logging.getLogger(__name__)

DEFAULT_SYNC_IMAGE = "ghcr.io/glm-operator/glm-operator:latest"


def sync_image() -> str:
    """Image of the gateway's sync sidecar: the operator's own image (the chart sets it)."""
    return os.environ.get("GLM_OPERATOR_GATEWAY_SYNC_IMAGE") or DEFAULT_SYNC_IMAGE


def apply_gateway(api: KubeClient, body: Mapping[str, Any], image: str) -> bool:
    """Render and apply one GLMGateway's children; False (and a Warning Event) for an invalid spec."""
    meta = body["metadata"]
    try:
        spec = GLMGatewaySpec.model_validate(body.get("spec") or {})
    except ValidationError as err:
        fields = "; ".join(f"spec.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors())
        api.create_event(
            body, reason="InvalidSpec", message=f"GLMGateway not applied: {fields}", type_="Warning"
        )
        return False
    for obj in render_gateway(body, spec, image):
        api.apply(obj)
    status = {"observedGeneration": meta.get("generation"), "service": gateway_name(meta["name"])}
    path = object_path(API_VERSION, GATEWAY_KIND, meta["namespace"], meta["name"]) + "/status"
    api.request("PATCH", path, body={"status": status}, content_type="application/merge-patch+json")
    log.info("GLMGateway %s/%s applied", meta["namespace"], meta["name"])
    return True
