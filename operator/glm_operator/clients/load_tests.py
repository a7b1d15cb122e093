"""``glm-operator loadtest --record``'s two apiserver calls: read the GLMDeployment, write its record.

The record is a ConfigMap (``render.names.load_test_name``) owned by the GLMDeployment, so it is
deleted with it, and labelled as the operator's children are, so the operator's child watch brings
it to the GLMDeployment's reconcile (``desired.measured_speed``). It is server-side applied: a new
recording replaces the last one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from glm_operator.api.v1alpha1 import API_VERSION, KIND
from glm_operator.clients.kube import KubeClient
from glm_operator.render import names


def read_glmdeployment(api: KubeClient, namespace: str, name: str) -> dict[str, Any] | None:
    return api.get(API_VERSION, KIND, namespace, name)


def load_test_config_map(glmdeployment: Mapping[str, Any], data: Mapping[str, str]) -> dict[str, Any]:
    """The ConfigMap of a recording, owned by ``glmdeployment``."""
    meta = glmdeployment["metadata"]
    name = str(meta["name"])
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": names.load_test_name(name),
            "namespace": meta["namespace"],
            "labels": names.load_test_labels(name),
            "ownerReferences": [{"apiVersion": API_VERSION, "kind": KIND, "name": name, "uid": meta["uid"]}],
        },
        "data": dict(data),
    }


def record_load_test(
    api: KubeClient, glmdeployment: Mapping[str, Any], data: Mapping[str, str]
) -> dict[str, Any]:
    """Write (or replace) the recording; the ConfigMap as stored."""
    return api.apply(load_test_config_map(glmdeployment, data))
