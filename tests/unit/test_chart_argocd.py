"""The Argo CD health check (manifests/argocd/health.lua), run with a real Lua 5.4 interpreter.

Needs `lua5.4` (Debian package lua5.4; CI installs it). Missing interpreter is a failure with
that instruction, not a skip.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "manifests" / "argocd" / "health.lua"
CONFIGMAP = ROOT / "manifests" / "argocd" / "argocd-cm.yaml"
KEY = "resource.customizations.health.inference.glm.dev_GLMDeployment"


@pytest.fixture(scope="module")
def lua() -> str:
    for name in ("lua5.4", "lua"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail("lua5.4 not found: `apt-get install -y lua5.4` (CI installs it)")


def to_lua(value: Any) -> str:
    """A JSON-like value as a Lua literal (lists become 1-based sequences, as Argo CD's JSON→Lua)."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON string escapes are valid Lua escapes for this text
    if isinstance(value, list):
        return "{" + ", ".join(to_lua(item) for item in value) + "}"
    return "{" + ", ".join(f"[{json.dumps(key)}] = {to_lua(item)}" for key, item in value.items()) + "}"


def health(lua: str, obj: dict[str, Any]) -> tuple[str, str]:
    program = (
        f"obj = {to_lua(obj)}\n"
        f"local hs = dofile({json.dumps(str(SCRIPT))})\n"
        'io.write(hs.status, "\\t", hs.message)\n'
    )
    result = subprocess.run([lua, "-"], input=program, capture_output=True, text=True, check=True)
    status, message = result.stdout.split("\t", 1)
    return status, message


def glmd(generation: int = 3, status: dict[str, Any] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "inference.glm.dev/v1alpha1",
        "kind": "GLMDeployment",
        "metadata": {"name": "glm", "generation": generation},
        "spec": {"model": {"id": "zai-org/GLM-4.5-Air"}},
    }
    if status is not None:
        obj["status"] = status
    return obj


def cond(type_: str, status: str, message: str = "", reason: str = "") -> dict[str, Any]:
    return {"type": type_, "status": status, "message": message, "reason": reason}


CASES: dict[str, tuple[dict[str, Any], str, str]] = {
    "no status yet": (glmd(), "Progressing", "Waiting for the operator"),
    "old generation": (
        glmd(3, {"observedGeneration": 2, "phase": "Ready", "conditions": [cond("Available", "True")]}),
        "Progressing",
        "generation 3",
    ),
    "ready": (
        glmd(
            3,
            {
                "observedGeneration": 3,
                "phase": "Ready",
                "conditions": [
                    cond("Planned", "True"),
                    cond("Available", "True", "2/2 replicas ready"),
                    cond("Progressing", "False"),
                    cond("Degraded", "False"),
                ],
            },
        ),
        "Healthy",
        "2/2 replicas ready",
    ),
    "ready by phase only": (glmd(3, {"observedGeneration": 3, "phase": "Ready"}), "Healthy", "ready"),
    "rolling out": (
        glmd(
            3,
            {
                "observedGeneration": 3,
                "phase": "Deploying",
                "conditions": [
                    cond("Available", "True"),
                    cond("Progressing", "True", "1/2 replicas loading weights"),
                ],
            },
        ),
        "Progressing",
        "loading weights",
    ),
    "degraded condition": (
        glmd(
            3,
            {
                "observedGeneration": 3,
                "phase": "Degraded",
                "conditions": [
                    cond("Available", "True"),
                    cond("Degraded", "True", "replica crash-looping: CUDA OOM"),
                ],
            },
        ),
        "Degraded",
        "CUDA OOM",
    ),
    "plan impossible": (
        glmd(
            3,
            {
                "observedGeneration": 3,
                "phase": "Pending",
                "conditions": [cond("Planned", "False", "", "NoGPUFits")],
            },
        ),
        "Degraded",
        "NoGPUFits",
    ),
    "failed phase": (glmd(3, {"observedGeneration": 3, "phase": "Failed"}), "Degraded", "Failed"),
    "planning": (glmd(3, {"observedGeneration": 3, "phase": "Planning"}), "Progressing", "Planning"),
    "not yet available": (
        glmd(
            3,
            {
                "observedGeneration": 3,
                "phase": "Deploying",
                "conditions": [cond("Available", "False", "0/1 replicas ready")],
            },
        ),
        "Progressing",
        "0/1 replicas ready",
    ),
    "no generation in metadata": (
        {"metadata": {}, "status": {"phase": "Ready", "conditions": [cond("Available", "True")]}},
        "Healthy",
        "",
    ),
}


@pytest.mark.parametrize("obj,expected_status,message_part", CASES.values(), ids=list(CASES))
def test_health(lua: str, obj: dict[str, Any], expected_status: str, message_part: str) -> None:
    status, message = health(lua, obj)
    assert status == expected_status, message
    assert message_part in message
    assert message  # Argo CD shows it; never empty


def test_configmap_snippet_embeds_the_same_script() -> None:
    configmap = yaml.safe_load(CONFIGMAP.read_text())
    assert configmap["kind"] == "ConfigMap" and configmap["metadata"]["name"] == "argocd-cm"
    assert configmap["data"][KEY] == SCRIPT.read_text()
