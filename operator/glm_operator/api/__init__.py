"""Pydantic models of the GLMDeployment API: the single source of the CRD schema.

``glm_operator.api.v1alpha1`` holds the models; ``devtools.crd`` (in the checkout, not the
package) generates the CustomResourceDefinition from them. The names most code needs are re-exported here.
"""

from glm_operator.api.v1alpha1 import (
    API_VERSION,
    CRD_NAME,
    GROUP,
    KIND,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
    AutoscalingSpec,
    Condition,
    GLMDeployment,
    GLMDeploymentSpec,
    GLMDeploymentStatus,
    GPUSpec,
    ModelSpec,
    PlanStatus,
    PlanVariant,
    RejectedVariant,
    ServingSpec,
    spec_from_dict,
    status_from_dict,
)

__all__ = [
    "API_VERSION",
    "CRD_NAME",
    "GROUP",
    "KIND",
    "PLURAL",
    "SHORT_NAMES",
    "SINGULAR",
    "VERSION",
    "AutoscalingSpec",
    "Condition",
    "GLMDeployment",
    "GLMDeploymentSpec",
    "GLMDeploymentStatus",
    "GPUSpec",
    "ModelSpec",
    "PlanStatus",
    "PlanVariant",
    "RejectedVariant",
    "ServingSpec",
    "spec_from_dict",
    "status_from_dict",
]
