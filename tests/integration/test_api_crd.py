"""The generated CRD on a real kube-apiserver: installs, validates, explains, prints, scales.

Every bad spec in the table is rejected both by the apiserver (structural schema, CEL rules,
strict field validation) and by the pydantic models, so the offline commands and the cluster agree.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from glm_operator.api import CRD_NAME, spec_from_dict
from tests.harness.cluster import SessionCluster

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CRD_FILE = ROOT / "crds" / "glmdeployments.inference.glm.dev.yaml"
SAMPLES = sorted((ROOT / "manifests" / "samples").glob("*.yaml"))


def install_crd(cluster: SessionCluster) -> None:
    """Apply the committed CRD (server-side, idempotent) and wait until it is Established."""
    cluster.kubectl(
        "apply", "--server-side", "--force-conflicts", "--field-manager=glm-e2e-crd", "-f", str(CRD_FILE)
    )
    cluster.local.wait_crds_established(CRD_NAME)


@pytest.fixture(scope="module")
def namespace(cluster: SessionCluster) -> Iterator[str]:
    install_crd(cluster)
    yield cluster.namespace("api")


def manifest(spec: dict[str, Any] | None, name: str = "glm") -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "inference.glm.dev/v1alpha1",
        "kind": "GLMDeployment",
        "metadata": {"name": name},
    }
    if spec is not None:
        obj["spec"] = spec
    return obj


def dry_run(cluster: SessionCluster, namespace: str, obj: dict[str, Any]) -> Any:
    return cluster.kubectl(
        "apply", "--dry-run=server", "-n", namespace, "-f", "-", input=yaml.safe_dump(obj), check=False
    )


def test_crd_is_established(cluster: SessionCluster, namespace: str) -> None:
    crd = json.loads(cluster.kubectl("get", "crd", CRD_NAME, "-o", "json").stdout)
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions["Established"] == "True"
    assert conditions.get("NonStructuralSchema", "False") == "False"
    assert crd["status"]["acceptedNames"]["shortNames"] == ["glmd"]


@pytest.mark.parametrize("sample", SAMPLES, ids=[path.name for path in SAMPLES])
def test_samples_are_accepted(cluster: SessionCluster, namespace: str, sample: Path) -> None:
    result = cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", str(sample), check=False)
    assert result.returncode == 0, result.stderr
    spec_from_dict(yaml.safe_load(sample.read_text())["spec"])


def test_there_are_four_samples() -> None:
    names = {path.name for path in SAMPLES}
    assert {"glm-4.5-air.yaml", "glm-4.7-flash.yaml", "glm-5.2.yaml", "glm-5.3-flash.yaml"} <= names


GOOD: dict[str, Any] = {"model": {"id": "zai-org/GLM-4.5-Air"}}


def bad(path: str, value: Any) -> dict[str, Any]:
    """GOOD with ``value`` set at the dotted ``path`` (``gpu.tensorParallelSize``)."""
    spec = copy.deepcopy(GOOD)
    *parents, leaf = path.split(".")
    node = spec
    for parent in parents:
        node = node.setdefault(parent, {})
    node[leaf] = value
    return spec


# (spec, field path the apiserver must name in its error)
BAD_SPECS: dict[str, tuple[dict[str, Any] | None, str]] = {
    "missing spec": (None, "spec"),
    "missing model": ({"quantization": "fp8"}, "spec.model"),
    "model without id or config": ({"model": {"servedModelName": "glm"}}, "spec.model"),
    "model id null": ({"model": {"id": None}}, "spec.model"),
    "bad source scheme": (bad("model.source", "http://example.com/glm"), "spec.model.source"),
    "bad model id": (bad("model.id", "not a repo id"), "spec.model.id"),
    "context as string": (bad("contextLength", "long"), "spec.contextLength"),
    "negative context": (bad("contextLength", -1), "spec.contextLength"),
    "context below 256": (bad("contextLength", 255), "spec.contextLength"),
    "unknown quantization": (bad("quantization", "fp4"), "spec.quantization"),
    "unknown kv cache dtype": (bad("kvCacheDtype", "int8"), "spec.kvCacheDtype"),
    "memory utilisation 0.99": (bad("gpu.memoryUtilization", 0.99), "spec.gpu.memoryUtilization"),
    "memory utilisation 0.3": (bad("gpu.memoryUtilization", 0.3), "spec.gpu.memoryUtilization"),
    "memory utilisation string": (bad("gpu.memoryUtilization", "high"), "spec.gpu.memoryUtilization"),
    "tensor parallel 3": (bad("gpu.tensorParallelSize", 3), "spec.gpu.tensorParallelSize"),
    "tensor parallel 64": (bad("gpu.tensorParallelSize", 64), "spec.gpu.tensorParallelSize"),
    "pipeline parallel without multi-node": (
        bad("gpu.pipelineParallelSize", 2),
        "spec.gpu.pipelineParallelSize",
    ),
    "products not a list": (bad("gpu.products", "H100"), "spec.gpu.products"),
    "min replicas above max": (
        bad("autoscaling", {"minReplicas": 5, "maxReplicas": 2}),
        "spec.autoscaling.minReplicas",
    ),
    "min replicas negative": (bad("autoscaling", {"minReplicas": -1}), "spec.autoscaling.minReplicas"),
    "idle without zero": (
        bad("autoscaling", {"minReplicas": 1, "idleSeconds": 60}),
        "spec.autoscaling.idleSeconds",
    ),
    "negative replicas": (bad("replicas", -1), "spec.replicas"),
    "replicas as float": (bad("replicas", 1.5), "spec.replicas"),
    "port out of range": (bad("serving.port", 70000), "spec.serving.port"),
    "pinned quantization not allowed": (
        {**bad("allowedQuantizations", ["bf16"]), "quantization": "fp8"},
        "spec.allowedQuantizations",
    ),
    "unknown allowed quantization": (bad("allowedQuantizations", ["fp4"]), "spec.allowedQuantizations[0]"),
    "empty allowed quantizations": (bad("allowedQuantizations", []), "spec.allowedQuantizations"),
    "maxNumSeqs below minConcurrency": (
        {**bad("serving.maxNumSeqs", 2), "minConcurrency": 4},
        "spec.serving.maxNumSeqs",
    ),
    "managed flag in extraArgs": (
        bad("serving.extraArgs", ["--max-model-len=4096"]),
        "spec.serving.extraArgs",
    ),
    "env value and valueFrom": (
        bad(
            "serving.env",
            [{"name": "A", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        ),
        "spec.serving.env[0]",
    ),
    "bad toleration operator": (
        bad("serving.tolerations", [{"operator": "Maybe"}]),
        "spec.serving.tolerations[0].operator",
    ),
    "unknown spec field": (bad("tensorParallelSize", 8), "spec.tensorParallelSize"),
    "unknown nested field": (bad("gpu.count", 8), "spec.gpu.count"),
}


@pytest.mark.parametrize("spec,field", BAD_SPECS.values(), ids=list(BAD_SPECS))
def test_bad_specs_are_rejected(
    cluster: SessionCluster, namespace: str, spec: dict[str, Any] | None, field: str
) -> None:
    result = dry_run(cluster, namespace, manifest(spec))
    assert result.returncode != 0, f"accepted: {spec}"
    assert field in result.stderr, result.stderr
    if spec is not None:
        with pytest.raises(ValidationError):
            spec_from_dict(spec)


def test_unknown_fields_need_strict_validation(cluster: SessionCluster, namespace: str) -> None:
    """Structural schemas prune unknown fields; strict field validation makes that an error.

    kubectl apply uses --validate=strict by default; with --validate=false the field is silently
    dropped (pruned) — documented behaviour, shown here so nobody relies on pruning for safety.
    """
    obj = manifest(bad("gpu.count", 8))
    strict = dry_run(cluster, namespace, obj)
    assert strict.returncode != 0
    assert 'unknown field "spec.gpu.count"' in strict.stderr
    lax = cluster.kubectl(
        "apply", "--dry-run=server", "--validate=false", "-n", namespace, "-f", "-", "-o", "json",
        input=yaml.safe_dump(obj),
    )  # fmt: skip
    assert "count" not in json.loads(lax.stdout)["spec"]["gpu"]


def test_name_must_be_a_short_dns_label(cluster: SessionCluster, namespace: str) -> None:
    result = dry_run(cluster, namespace, manifest(GOOD, name="g" * 41))
    assert result.returncode != 0
    assert "metadata.name" in result.stderr
    assert dry_run(cluster, namespace, manifest(GOOD, name="g" * 40)).returncode == 0


def test_defaults_are_applied_by_the_apiserver(cluster: SessionCluster, namespace: str) -> None:
    result = cluster.kubectl(
        "apply",
        "--dry-run=server",
        "-n",
        namespace,
        "-f",
        "-",
        "-o",
        "json",
        input=yaml.safe_dump(manifest(GOOD)),
    )
    spec = json.loads(result.stdout)["spec"]
    # No memoryUtilization default: left out, it is the vLLM release's own (planning.releases).
    assert spec["gpu"] == {
        "allowMultiNode": False,
        "pipelineParallelSize": 0,
        "tensorParallelSize": 0,
        "decodeContextParallelSize": 0,
        "dataParallelSize": 0,
    }
    assert spec["serving"] == {"port": 8000}
    assert (spec["quantization"], spec["kvCacheDtype"], spec["contextLength"], spec["replicas"]) == (
        "auto",
        "auto",
        32768,
        1,
    )
    # The defaulted object is what the operator reads: the models accept it unchanged.
    assert spec_from_dict(spec).to_wire()["gpu"] == spec_from_dict(GOOD).to_wire()["gpu"]


def test_kubectl_explain_is_the_manual(cluster: SessionCluster, namespace: str) -> None:
    out = cluster.kubectl("explain", "glmdeployment.spec.gpu").stdout
    for field in (
        "products",
        "memoryUtilization",
        "tensorParallelSize",
        "pipelineParallelSize",
        "allowMultiNode",
    ):
        assert field in out
    assert "vLLM --gpu-memory-utilization" in out
    tp = cluster.kubectl("explain", "glmd.spec.gpu.tensorParallelSize").stdout
    assert "0: the planner picks the smallest size that fits" in tp
    recursive = cluster.kubectl("explain", "glmdeployment", "--recursive").stdout
    for field in ("servedModelName", "apiKeySecretRef", "scaleDownStabilizationSeconds", "weightsGiBPerGPU"):
        assert field in recursive


def test_printer_columns_scale_and_status(cluster: SessionCluster) -> None:
    ns = cluster.namespace("api-scale")
    install_crd(cluster)
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(manifest(GOOD, name="x")))
    header = cluster.kubectl("get", "glmd", "-n", ns).stdout.splitlines()[0].split()
    assert header == ["NAME", "MODEL", "QUANT", "CONTEXT", "GPU", "TP", "READY", "DESIRED", "PHASE", "AGE"]
    wide = cluster.kubectl("get", "glmd", "-n", ns, "-o", "wide").stdout.splitlines()
    assert "SERVED" in wide[0].split()
    assert "zai-org/GLM-4.5-Air" in wide[1] and "32768" in wide[1]

    cluster.kubectl("scale", "-n", ns, "glmd/x", "--replicas=3")
    replicas = cluster.kubectl("get", "-n", ns, "glmd/x", "-o", "jsonpath={.spec.replicas}").stdout
    assert replicas == "3"
    scale = json.loads(cluster.kubectl("get", "-n", ns, "glmd/x", "--subresource=scale", "-o", "json").stdout)
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 3

    # The status subresource accepts what the operator writes, and validates it too.
    status = {
        "status": {
            "observedGeneration": 2,
            "phase": "Ready",
            "replicas": 3,
            "readyReplicas": 3,
            "desiredReplicas": 3,
            "selector": "inference.glm.dev/deployment=x",
            "gpu": "3x NVIDIA-H100-80GB-HBM3",
            "tensorParallelSize": "2",
            "quantization": "fp8",
            "conditions": [
                {"type": "Available", "status": "True", "reason": "AllReplicasReady", "message": "3/3 ready",
                 "lastTransitionTime": "2025-01-01T00:00:00Z", "observedGeneration": 2},
            ],
        }
    }  # fmt: skip
    cluster.kubectl(
        "patch", "-n", ns, "glmd/x", "--subresource=status", "--type=merge", "-p", json.dumps(status)
    )
    row = cluster.kubectl("get", "glmd", "-n", ns, "x", "--no-headers").stdout
    assert row.split()[:5] == ["x", "zai-org/GLM-4.5-Air", "fp8", "32768", "3x"]
    assert row.split()[5:10] == ["NVIDIA-H100-80GB-HBM3", "2", "3", "3", "Ready"]
    scale = json.loads(cluster.kubectl("get", "-n", ns, "glmd/x", "--subresource=scale", "-o", "json").stdout)
    assert scale["status"] == {"replicas": 3, "selector": "inference.glm.dev/deployment=x"}
    wrong = cluster.kubectl(
        "patch", "-n", ns, "glmd/x", "--subresource=status", "--type=merge", "-p",
        json.dumps({"status": {"phase": "Sleeping"}}), check=False,
    )  # fmt: skip
    assert wrong.returncode != 0 and "status.phase" in wrong.stderr
