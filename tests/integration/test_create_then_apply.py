"""A child created with POST is then owned by server-side apply like one created by apply: a field
dropped from the desired object is removed by the next apply (real kube-apiserver)."""

from __future__ import annotations

from typing import Any

from kubernetes import config as k8s_config

from glm_operator.clients.kube import FIELD_MANAGER, KubeClient
from tests.harness.cluster import SessionCluster


def deployment(ns: str, name: str, *, extra_label: bool, args: list[str]) -> dict[str, Any]:
    labels = {"app": name, **({"extra": "yes"} if extra_label else {})}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "example.invalid/vllm:1", "args": args}]},
            },
        },
    }


def managers(obj: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (e["manager"], e["operation"])
        for e in obj["metadata"].get("managedFields") or []
        if e.get("manager") == FIELD_MANAGER
    ]


def test_a_posted_child_hands_its_fields_to_apply_and_a_dropped_field_is_removed(
    cluster: SessionCluster, ns: str
) -> None:
    api = KubeClient(k8s_config.new_client_from_config(str(cluster.kubeconfig)))
    created = api.create_or_apply(deployment(ns, "posted", extra_label=True, args=["--a", "--b"]))
    assert managers(created) == [(FIELD_MANAGER, "Update")]  # handed over by the next apply

    # Dropped from the desired object: the label and one argument go away on the server.
    applied = api.apply(deployment(ns, "posted", extra_label=False, args=["--a"]))
    live = api.get("apps/v1", "Deployment", ns, "posted")
    assert live is not None
    assert "extra" not in live["metadata"]["labels"]
    assert live["spec"]["template"]["spec"]["containers"][0]["args"] == ["--a"]
    assert managers(live) == [(FIELD_MANAGER, "Apply")]
    # Defaulted fields the create owned were handed over too; giving them up re-defaults them to
    # the same values: an unchanged desired object is no rollout.
    generation = applied["metadata"]["generation"]
    again = api.apply(deployment(ns, "posted", extra_label=False, args=["--a"]))
    assert again["metadata"]["generation"] == generation
    assert again["spec"]["template"] == live["spec"]["template"]

    # A second create of the same child (a stale cache): 409 from POST, then an apply.
    same = api.create_or_apply(deployment(ns, "posted", extra_label=False, args=["--a", "--c"]))
    assert same["spec"]["template"]["spec"]["containers"][0]["args"] == ["--a", "--c"]


def test_an_apply_hands_over_a_child_that_was_applied_before_and_updated_since(
    cluster: SessionCluster, ns: str
) -> None:
    """An object with both entries of the manager (applied, then written by create/update with
    the same manager name): the Update entry's fields are merged into the Apply entry."""
    api = KubeClient(k8s_config.new_client_from_config(str(cluster.kubeconfig)))
    api._apply(deployment(ns, "both", extra_label=False, args=["--a"]))
    cluster.kubectl("label", "deployment", "both", "-n", ns, "extra=yes", f"--field-manager={FIELD_MANAGER}")
    live = api.get("apps/v1", "Deployment", ns, "both")
    assert live is not None and sorted(managers(live)) == [
        (FIELD_MANAGER, "Apply"),
        (FIELD_MANAGER, "Update"),
    ]
    applied = api.apply(deployment(ns, "both", extra_label=False, args=["--b"]))
    assert "extra" not in applied["metadata"]["labels"]  # owned by the Update entry, now pruned
    assert applied["spec"]["template"]["spec"]["containers"][0]["args"] == ["--b"]
    assert managers(applied) == [(FIELD_MANAGER, "Apply")]


def test_the_hand_over_of_a_child_changed_since_it_was_read_re_reads_it(
    cluster: SessionCluster, ns: str
) -> None:
    api = KubeClient(k8s_config.new_client_from_config(str(cluster.kubeconfig)))
    created = api.create(deployment(ns, "stale", extra_label=True, args=["--a"]))
    cluster.kubectl("annotate", "deployment", "stale", "-n", ns, "someone=else")  # a newer version
    upgraded = api.upgrade_managed_fields(created)  # the JSON patch's test of the version fails first
    assert upgraded["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]
    assert upgraded["metadata"]["annotations"]["someone"] == "else"
    assert managers(upgraded) == [(FIELD_MANAGER, "Apply")]
