"""The samples in ``manifests/samples`` and what they need in a namespace before they can start.

A sample may name an API-key Secret (``serving.apiKeySecretRef``) and a model-cache claim
(``serving.modelCache.claimName``), as a real user's would. The local cluster has no storage
provisioner, so ``prerequisites`` makes each claim bound to a PersistentVolume made for it
(``hostPath``, never mounted: KWOK runs no containers) and a Secret with a random key.
The PersistentVolumes are cluster-scoped: ``volume_selector`` finds them for cleanup.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.harness.cluster import LocalCluster, repo_root

SAMPLES_DIR = repo_root() / "manifests" / "samples"
VOLUME_LABEL = "glm-operator.testing/sample-namespace"
VOLUME_SIZE = "1Ti"


def sample_files() -> list[Path]:
    return sorted(SAMPLES_DIR.glob("*.yaml"))


def prerequisites(namespace: str, files: Sequence[Path] | None = None) -> list[dict[str, Any]]:
    """Secrets and bound PersistentVolume/Claim pairs that the samples in ``files`` refer to."""
    objects: list[dict[str, Any]] = []
    for path in sample_files() if files is None else files:
        serving = (yaml.safe_load(path.read_text()).get("spec") or {}).get("serving") or {}
        key_ref = serving.get("apiKeySecretRef")
        if key_ref:
            objects.append(_secret(namespace, key_ref["name"], key_ref["key"]))
        cache = serving.get("modelCache")
        if cache:
            objects += _bound_claim(namespace, cache["claimName"])
    return objects


def create_prerequisites(cluster: LocalCluster, namespace: str, timeout: float = 60) -> None:
    """Create what the samples need in ``namespace`` (kept if present) and wait for the claims to bind.

    The PersistentVolume controller binds a claim a moment after it is created; a pod created
    before that is reported Unschedulable ("unbound immediate PersistentVolumeClaims").
    """
    objects = prerequisites(namespace)
    cluster.kubectl("create", "-f", "-", input=yaml.safe_dump_all(objects), check=False)
    claims = [f"pvc/{o['metadata']['name']}" for o in objects if o["kind"] == "PersistentVolumeClaim"]
    if claims:
        cluster.kubectl(
            "wait",
            "-n",
            namespace,
            "--for=jsonpath={.status.phase}=Bound",
            *claims,
            f"--timeout={timeout:.0f}s",
        )


def volume_selector(namespace: str) -> str:
    return f"{VOLUME_LABEL}={namespace}"


def _secret(namespace: str, name: str, key: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "stringData": {key: secrets.token_urlsafe(24)},
    }


def _bound_claim(namespace: str, claim: str) -> list[dict[str, Any]]:
    volume = f"{namespace}-{claim}"[:63].rstrip("-")
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": volume, "labels": {VOLUME_LABEL: namespace}},
            "spec": {
                "capacity": {"storage": VOLUME_SIZE},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "hostPath": {"path": f"/var/lib/glm-samples/{volume}"},
                "claimRef": {"namespace": namespace, "name": claim},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": namespace},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "",
                "volumeName": volume,
                "resources": {"requests": {"storage": VOLUME_SIZE}},
            },
        },
    ]
