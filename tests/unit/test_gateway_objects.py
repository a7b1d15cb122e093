"""GLMGateway API and the objects rendered from it (pure)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from devtools.crd import build_gateway_crd, crd_yaml
from pydantic import ValidationError

from glm_operator.api.gateway import GLMGatewaySpec
from glm_operator.api.v1alpha1 import ModelSpec
from glm_operator.clients.haproxy import KeyCounters
from glm_operator.gateway.objects import KEYS_FILE, gateway_name, render_gateway, sync_args
from glm_operator.gateway.proxy import ProxyDriver
from glm_operator.gateway.routes import Backend, RoutingTable
from glm_operator.gateway.sync import GatewaySync, SyncOptions, map_addresses, settings_for
from tests.harness.gateway_objects import H100, vllm_pod

ROOT = Path(__file__).resolve().parents[2]
BODY: dict[str, Any] = {
    "apiVersion": "inference.glm.dev/v1alpha1",
    "kind": "GLMGateway",
    "metadata": {"name": "llm", "namespace": "team-a", "uid": "u-1", "generation": 2},
    "spec": {
        "apiKeys": {"secretName": "gateway-keys"},
        "limits": {"requestsPerMinute": 120, "concurrentRequests": 8, "tokensPerMinute": 50000},
        "service": {"type": "LoadBalancer", "port": 443, "annotations": {"a": "b"}},
    },
}


def _objects() -> dict[str, dict[str, Any]]:
    spec = GLMGatewaySpec.model_validate(BODY["spec"])
    return {obj["kind"]: obj for obj in render_gateway(BODY, spec, "example/glm-operator:1")}


def test_spec_defaults_follow_the_seed_gateway() -> None:
    spec = GLMGatewaySpec.model_validate({"apiKeys": {"secretName": "k"}})
    assert spec.read_timeout_seconds == 600
    assert spec.max_body_bytes == 20 * 1024 * 1024
    assert spec.load_balancing == "LeastRequests"
    assert spec.api_keys.key == "keys"


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({}, "apiKeys"),
        ({"apiKeys": {"secretName": "Bad_Name"}}, "secretName"),
        ({"apiKeys": {"secretName": "k"}, "limits": {"requestsPerMinute": 0}}, "requestsPerMinute"),
        ({"apiKeys": {"secretName": "k"}, "limits": {"tokensPerMinute": 0}}, "tokensPerMinute"),
        ({"apiKeys": {"secretName": "k"}, "loadBalancing": "Random"}, "loadBalancing"),
        ({"apiKeys": {"secretName": "k"}, "typo": 1}, "typo"),
    ],
)
def test_bad_specs_name_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        GLMGatewaySpec.model_validate(spec)


def test_a_long_context_served_name_is_accepted_but_not_one_with_spaces() -> None:
    assert ModelSpec(id="zai-org/GLM-5.3-Flash", servedModelName="glm-5.3-flash[1m]").served_model_name
    with pytest.raises(ValidationError, match=r"servedModelName|served_model_name"):
        ModelSpec(id="zai-org/GLM-5.3-Flash", servedModelName="glm flash")


def test_rendered_objects_are_owned_and_named_after_the_gateway() -> None:
    objects = _objects()
    assert set(objects) == {"ServiceAccount", "Role", "RoleBinding", "Deployment", "Service", "NetworkPolicy"}
    for obj in objects.values():
        suffix = "-vllm" if obj["kind"] == "NetworkPolicy" else ""
        assert obj["metadata"]["name"] == gateway_name("llm") + suffix == "llm-gateway" + suffix
        assert obj["metadata"]["namespace"] == "team-a"
        assert obj["metadata"]["ownerReferences"][0]["uid"] == "u-1"


def test_the_pod_mounts_the_key_secret_and_the_operator_does_not_read_it() -> None:
    pod = _objects()["Deployment"]["spec"]["template"]["spec"]
    secret = next(v["secret"] for v in pod["volumes"] if "secret" in v)
    assert secret == {"secretName": "gateway-keys", "items": [{"key": "keys", "path": KEYS_FILE}]}
    role = _objects()["Role"]
    assert all("secrets" not in rule["resources"] for rule in role["rules"])
    haproxy, sync = pod["containers"]
    assert haproxy["command"][:3] == ["haproxy", "-W", "-db"]  # master-worker: graceful reloads
    assert sync["image"] == pod["initContainers"][0]["image"] == "example/glm-operator:1"
    assert sync["args"] == sync_args("llm", once=False) and "--once" in pod["initContainers"][0]["args"]
    assert pod["terminationGracePeriodSeconds"] == 605  # in-flight requests may take the read timeout


def test_service_type_port_and_annotations() -> None:
    service = _objects()["Service"]
    assert service["spec"]["type"] == "LoadBalancer"
    assert service["spec"]["ports"][0]["port"] == 443 and service["spec"]["ports"][0]["targetPort"] == "http"
    assert service["metadata"]["annotations"] == {"a": "b"}


def test_proxy_settings_come_from_the_spec() -> None:
    spec = GLMGatewaySpec.model_validate(
        {**BODY["spec"], "loadBalancing": "RoundRobin", "maxPodsPerModel": 16}
    )
    settings = settings_for(spec, SyncOptions("team-a", "llm", "/run/x", "/keys/keys.map"))
    assert (settings.requests_per_minute, settings.max_concurrent_requests) == (120, 8)
    assert settings.tokens_per_minute == 50000 and settings.counts_tokens
    assert (settings.balance, settings.slots, settings.runtime_socket) == (
        "roundrobin",
        16,
        "/run/x/admin.sock",
    )


def test_address_map_leaves_unmapped_pods_out() -> None:
    pods = [vllm_pod("a", "m", H100, "10.0.0.1"), vllm_pod("b", "m", H100, "10.0.0.2")]
    mapped = map_addresses(pods, {"10.0.0.1": "127.0.0.5"})
    assert [p["status"]["podIP"] for p in mapped] == ["127.0.0.5"]
    # "*" maps any other address (a pod the test cannot name before it exists); none without an IP.
    no_ip = {**pods[1], "status": {"conditions": []}}
    mapped = map_addresses([*pods, no_ip], {"10.0.0.1": "127.0.0.5", "*": "127.0.0.9"})
    assert [p["status"]["podIP"] for p in mapped] == ["127.0.0.5", "127.0.0.9"]


def test_gateway_crd_is_generated_and_committed() -> None:
    crd = build_gateway_crd()
    assert crd["metadata"]["name"] == "glmgateways.inference.glm.dev"
    committed = ROOT / "crds" / "glmgateways.inference.glm.dev.yaml"
    assert committed.read_text() == crd_yaml(crd), "run `make generate` and commit"
    spec_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec_schema["required"] == ["apiKeys"]


def test_render_command_prints_the_objects(tmp_path: Path) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(BODY))
    done = subprocess.run(
        [sys.executable, "-m", "glm_operator.cli", "gateway", "render", "-f", str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    kinds = [doc["kind"] for doc in yaml.safe_load_all(done.stdout) if doc]
    assert kinds == ["ServiceAccount", "Role", "RoleBinding", "Deployment", "Service", "NetworkPolicy"]


def test_a_wake_request_after_a_reload_is_reported_though_the_table_started_again() -> None:
    """A reload starts HAProxy's wake table at zero: a count below the last one seen is new too."""
    counts = {"m": 21}

    class Runtime:
        def key_counters(self, table: str) -> list[KeyCounters]:
            assert table == "wake"
            return [KeyCounters(name, n, 0, 0, 0) for name, n in counts.items()]

    sync = GatewaySync(SyncOptions("ns", "llm", "/unused", None), cast(Any, Runtime()))
    sync.driver = ProxyDriver(cast(Any, None), None)
    sync.driver.current = RoutingTable((Backend("glm-flash", "m", ()),))
    assert sync.new_wake_requests(now=0.0) == ["glm-flash"]
    counts["m"] = 2  # reloaded: two requests since
    assert sync.new_wake_requests(now=20.0) == ["glm-flash"]
    assert sync.new_wake_requests(now=40.0) == [], "no new request"
