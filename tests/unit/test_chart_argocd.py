"""The Argo CD health check (manifests/argocd/health.lua), run by real Lua interpreters.

The interpreters are lupa's (PyPI, in the test extra): Lua 5.4, and Lua 5.1, the language of the
gopher-lua VM that Argo CD runs health checks in. No system package is needed.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "manifests" / "argocd" / "health.lua"
CONFIGMAP = ROOT / "manifests" / "argocd" / "argocd-cm.yaml"
KEY = "resource.customizations.health.inference.glm.dev_GLMDeployment"


@pytest.fixture(scope="module", params=["lua54", "lua51"])
def lua(request: pytest.FixtureRequest) -> Any:
    """A module of lupa's holding one Lua version's runtime."""
    return importlib.import_module(f"lupa.{request.param}")


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


def health(lua: Any, obj: dict[str, Any]) -> tuple[str, str]:
    """The script run as Argo CD runs it: ``obj`` a global, the returned table's status and message."""
    runtime = lua.LuaRuntime()
    hs = runtime.execute(f"obj = {to_lua(obj)}\nreturn dofile({json.dumps(str(SCRIPT))})")
    return str(hs["status"]), str(hs["message"])


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
def test_health(lua: Any, obj: dict[str, Any], expected_status: str, message_part: str) -> None:
    status, message = health(lua, obj)
    assert status == expected_status, message
    assert message_part in message
    assert message  # Argo CD shows it; never empty


def test_configmap_snippet_embeds_the_same_script() -> None:
    configmap = yaml.safe_load(CONFIGMAP.read_text())
    assert configmap["kind"] == "ConfigMap" and configmap["metadata"]["name"] == "argocd-cm"
    assert configmap["data"][KEY] == SCRIPT.read_text()
