"""The watch-fed caches: which node changes trigger a re-plan, and GPUs held per node."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from glm_operator.clients.kube import KubeClient
from glm_operator.controller.cache import ClusterCache, pod_gpu_requests
from glm_operator.controller.config import OperatorConfig, namespace_matches
from glm_operator.controller.event_handlers import owner_key
from glm_operator.controller.manager import Manager
from tests.harness.controller import wired


def node(name: str = "n1", gpus: str = "8", ready: str = "True", **labels: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {"nvidia.com/gpu.product": "NVIDIA-L4", **labels},
            "resourceVersion": "1",
        },
        "spec": {},
        "status": {
            "allocatable": {"nvidia.com/gpu": gpus},
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


def pod(
    uid: str, node_name: str | None, gpus: int, phase: str = "Running", owner: str | None = None
) -> dict[str, Any]:
    labels = (
        {"app.kubernetes.io/managed-by": "glm-operator", "inference.glm.dev/deployment": owner}
        if owner
        else {}
    )
    return {
        "metadata": {"uid": uid, "namespace": "llm", "labels": labels},
        "spec": {
            "nodeName": node_name,
            "containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": phase},
    }


def test_only_changes_placement_reads_trigger_a_replan() -> None:
    cache = ClusterCache()
    n = node()
    assert cache.set_node(n) is True
    heartbeat = copy.deepcopy(n)
    heartbeat["metadata"]["resourceVersion"] = "2"  # a lease/heartbeat-only update
    assert cache.set_node(heartbeat) is False
    tainted = copy.deepcopy(n)  # the node lifecycle controller's taints follow readiness
    tainted["spec"]["taints"] = [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]
    assert cache.set_node(tainted) is False
    # The controller-manager labels every new node with beta.kubernetes.io/os and /arch: no re-plan.
    assert cache.set_node(node(**{"beta.kubernetes.io/os": "linux"})) is False
    assert cache.set_node(node(**{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})) is True
    assert cache.set_node(node(**{"karpenter.sh/nodepool": "gpu"})) is True
    assert cache.set_node(node(gpus="4")) is True
    assert cache.set_node(node(gpus="4", ready="False")) is True
    cordoned = node(gpus="4", ready="False")
    cordoned["spec"]["unschedulable"] = True
    assert cache.set_node(cordoned) is True
    assert cache.delete_node("n1") is True and cache.delete_node("n1") is False


def test_gpus_used_counts_bound_live_pods_except_the_owners_own() -> None:
    cache = ClusterCache()
    pods = [
        pod("a", "n1", 4, owner="mine"),
        pod("b", "n1", 2, owner="other"),
        pod("c", "n1", 1),  # someone else's workload, not ours
        pod("d", None, 8),  # Pending: holds nothing yet
        pod("e", "n2", 8, phase="Succeeded"),  # finished: holds nothing
    ]
    cache.replace_pods([(p, owner_key(p)) for p in pods])
    assert cache.gpus_used() == {"n1": {"nvidia.com/gpu": 7}}
    assert cache.gpus_used(exclude_owner=("llm", "mine")) == {"n1": {"nvidia.com/gpu": 3}}
    cache.delete_pod("b")
    assert cache.gpus_used(exclude_owner=("llm", "mine")) == {"n1": {"nvidia.com/gpu": 1}}


def _walk(pods: dict[str, dict[str, Any]], exclude: tuple[str, str] | None) -> dict[str, dict[str, int]]:
    """The definition: every live, bound pod's GPU requests per node, the excluded owner's left out."""
    used: dict[str, dict[str, int]] = {}
    for p in pods.values():
        node_name, phase = p["spec"].get("nodeName"), p["status"]["phase"]
        if not node_name or phase in ("Succeeded", "Failed") or p["metadata"].get("deletionTimestamp"):
            continue
        if exclude is not None and owner_key(p) == exclude:
            continue
        for name, count in pod_gpu_requests(p).items():
            used.setdefault(node_name, {})[name] = used.get(node_name, {}).get(name, 0) + count
    return used


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["set", "set", "set", "delete", "replace"]),
            st.sampled_from(["p1", "p2", "p3", "p4", "p5"]),
            st.sampled_from([None, "n1", "n2"]),
            st.integers(1, 8),
            st.sampled_from(["Running", "Pending", "Succeeded"]),
            st.sampled_from([None, "a", "b"]),
        ),
        max_size=40,
    )
)
def test_gpus_used_kept_as_pods_change_equals_a_walk_over_the_pods_and_snapshots_stay_as_handed_out(
    steps: list[tuple[str, str, str | None, int, str, str | None]],
) -> None:
    cache = ClusterCache()
    pods: dict[str, dict[str, Any]] = {}
    handed_out: list[tuple[Any, dict[str, dict[str, int]]]] = []
    for op, uid, node_name, gpus, phase, owner in steps:
        if op == "set":
            pods[uid] = pod(uid, node_name, gpus, phase=phase, owner=owner)
            cache.set_pod(pods[uid], owner_key(pods[uid]))
        elif op == "delete":
            pods.pop(uid, None)
            cache.delete_pod(uid)
        else:  # a relist: the same pods, from scratch
            cache.replace_pods([(p, owner_key(p)) for p in pods.values()])
        for exclude in (None, ("llm", "a"), ("llm", "b")):
            got = cache.gpus_used(exclude_owner=exclude)
            assert got == _walk(pods, exclude)
            handed_out.append((got, copy.deepcopy(dict(got))))
    for got, then in handed_out:
        assert got == then, "a snapshot handed to a planner changed afterwards"


def test_pod_gpu_requests_sums_containers_and_per_type_names() -> None:
    p = pod("x", "n1", 2)
    p["spec"]["containers"].append({"resources": {"requests": {"nvidia.com/a100-80gb": "1", "cpu": "4"}}})
    assert pod_gpu_requests(p) == {"nvidia.com/gpu": 2, "nvidia.com/a100-80gb": 1}


def test_namespace_patterns_follow_kopf_globs() -> None:
    def watches(patterns: tuple[str, ...], ns: str) -> bool:
        return namespace_matches(patterns, ns)

    assert watches((), "anything")
    assert watches(("ctl-*",), "ctl-a") and not watches(("ctl-*",), "llm")
    assert not watches(("!kube-*",), "kube-system") and watches(("!kube-*",), "llm")
    assert watches(("llm", "team-*"), "team-b")


def test_nodes_are_cached_with_only_what_placement_reads() -> None:
    n = node()
    n["metadata"]["managedFields"] = [{"manager": "kubelet"}]
    n["status"]["images"] = [{"names": ["x"] * 50}]
    n["status"]["conditions"].append({"type": "MemoryPressure", "status": "False"})
    cache = ClusterCache()
    cache.set_node(n)
    slim = cache.nodes["n1"]
    assert "managedFields" not in slim["metadata"] and "images" not in slim["status"]
    assert slim["status"]["conditions"] == [{"type": "Ready", "status": "True"}]
    assert slim["metadata"]["labels"] == n["metadata"]["labels"]
    assert slim["status"]["allocatable"] == {"nvidia.com/gpu": "8"}


def test_node_labels_placement_does_not_read_are_dropped_unless_a_node_group_names_them() -> None:
    labels = {
        "kubernetes.io/hostname": "n1",
        "beta.kubernetes.io/arch": "amd64",
        "pool": "gpu-a",
        "cloud.google.com/gke-nodepool": "gpu-h100",
        "karpenter.k8s.aws/instance-gpu-name": "h100",
    }
    plain = ClusterCache()
    plain.set_node(node(**labels))
    assert plain.nodes["n1"]["metadata"]["labels"] == {
        "nvidia.com/gpu.product": "NVIDIA-L4",
        "cloud.google.com/gke-nodepool": "gpu-h100",
        "karpenter.k8s.aws/instance-gpu-name": "h100",
    }
    groups = {"nodeGroups": [{"name": "a", "nodeSelector": {"pool": "gpu-a"}}, {"name": "bad"}, "x"]}
    config = OperatorConfig(leader_election=False, node_groups=groups)
    cache = Manager(config, KubeClient()).cache
    cache.set_node(node(**labels))
    assert cache.nodes["n1"]["metadata"]["labels"]["pool"] == "gpu-a"
    assert "kubernetes.io/hostname" not in cache.nodes["n1"]["metadata"]["labels"]
    assert cache.set_node(node(**{**labels, "pool": "gpu-b"})) is True  # a node group counts by it
    assert cache.set_node(node(**{**labels, "pool": "gpu-b", "kubernetes.io/hostname": "x"})) is False


def test_an_older_version_never_replaces_a_newer_one_in_the_cache() -> None:
    owned = ClusterCache().owned
    body = {"metadata": {"namespace": "llm", "name": "a", "uid": "u1", "resourceVersion": "10"}, "spec": {}}
    owned.set_glmdeployment({**body, "status": {"desiredReplicas": 3}})
    owned.set_glmdeployment({**body, "metadata": {**body["metadata"], "resourceVersion": "9"}})
    assert owned.glmdeployments[("llm", "a")]["status"] == {"desiredReplicas": 3}
    recreated = {**body, "metadata": {**body["metadata"], "uid": "u2", "resourceVersion": "5"}}
    owned.set_glmdeployment(recreated)  # same name, new object: taken whatever its version
    assert owned.glmdeployments[("llm", "a")]["metadata"]["uid"] == "u2"


def test_a_version_already_cached_is_not_stored_again() -> None:
    """A no-op apply's answer (a resync) or the watch echo of a write carries the cached version:
    the cached copy stays (replacing it by an equal one churned the heap), a newer one replaces it."""
    owned = ClusterCache().owned
    key = ("llm", "a")

    def dep(rv: str) -> dict[str, Any]:
        meta = {"name": "a-l4", "uid": "d", "resourceVersion": rv, "managedFields": [{"manager": "x"}]}
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {"replicas": 1}}

    owned.set_child(key, dep("5"))
    cached = owned.child(key, "apps/v1", "Deployment", "a-l4")
    owned.set_child(key, dep("5"))
    assert owned.child(key, "apps/v1", "Deployment", "a-l4") is cached
    owned.set_child(key, dep("6"))
    newer = owned.child(key, "apps/v1", "Deployment", "a-l4")
    assert newer is not cached and newer is not None and newer["metadata"]["resourceVersion"] == "6"
    assert "managedFields" not in newer["metadata"]

    body = {"metadata": {"namespace": "llm", "name": "a", "uid": "u1", "resourceVersion": "10"}, "spec": {}}
    owned.set_glmdeployment(body)
    first = owned.glmdeployments[key]
    owned.set_glmdeployment(copy.deepcopy(body))
    assert owned.glmdeployments[key] is first
    running = pod("p1", "n1", 1, owner="a")
    running["metadata"]["resourceVersion"] = "3"
    owned.set_pod(key, running)
    first_pod = owned.pods_of(key)[0]
    owned.set_pod(key, copy.deepcopy(running))
    assert owned.pods_of(key)[0] is first_pod


def test_children_and_pods_are_kept_per_glmdeployment() -> None:
    owned = ClusterCache().owned
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "a-l4", "uid": "d", "resourceVersion": "1"},
    }
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "a", "uid": "s", "resourceVersion": "1"},
    }
    owned.set_child(("llm", "a"), dep)
    owned.set_child(("llm", "a"), svc)
    assert owned.children_of(("llm", "a"), {"Deployment"}) == [dep]
    owned.delete_child(("llm", "a"), "apps/v1", "Deployment", "a-l4")
    assert owned.children_of(("llm", "a"), {"Deployment", "LeaderWorkerSet"}) == []
    owned.set_pod(("llm", "a"), pod("p1", "n1", 1, owner="a"))
    assert [p["metadata"]["uid"] for p in owned.pods_of(("llm", "a"))] == ["p1"]
    owned.delete_pod(("llm", "a"), "p1")
    assert owned.pods_of(("llm", "a")) == []


def test_the_echo_of_a_cached_version_is_known_a_newer_one_is_not() -> None:
    from glm_operator.controller.cache import is_known

    def obj(rv: str, uid: str = "u1") -> dict[str, Any]:
        return {"metadata": {"uid": uid, "resourceVersion": rv}}

    assert is_known(obj("7"), obj("7")) and is_known(obj("6"), obj("7"))
    assert not is_known(obj("8"), obj("7"))
    assert not is_known(obj("7", uid="u2"), obj("7"))  # a re-created object of the same name
    assert not is_known(obj("7"), None) and not is_known(obj("x"), obj("x"))


def test_a_namespace_being_deleted_takes_its_glmdeployments_pods_and_gpus_out_of_the_caches() -> None:
    """kopf stops a namespace pattern's watches in a namespace being deleted before its objects'
    DELETED events: the operator forgets them itself, and ignores what still comes, until the
    namespace is gone or made again."""

    def glmd(name: str, ns: str = "llm", rv: str = "1") -> dict[str, Any]:
        return {
            "apiVersion": "inference.glm.dev/v1alpha1",
            "kind": "GLMDeployment",
            "metadata": {"name": name, "namespace": ns, "uid": f"u-{ns}-{name}", "resourceVersion": rv},
            "spec": {"model": {"id": "zai-org/glm-4-9b-chat"}},
        }

    def namespace(name: str, deleting: bool) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name}
        if deleting:
            meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
        return {"metadata": meta}

    w = wired(OperatorConfig(namespaces=("llm*",), leader_election=False))
    h = w.handlers
    h.on_glmdeployment("ADDED", glmd("a"))
    h.on_glmdeployment("ADDED", glmd("b", ns="llm-other"))
    h.on_pod("ADDED", pod("p1", "n1", 8, owner="a"))
    h.on_pod("ADDED", pod("p2", "n1", 4))  # not the operator's, same namespace
    h.on_gateway("ADDED", {"metadata": {"namespace": "llm", "name": "gw", "uid": "g"}})
    assert w.cache.gpus_used() == {"n1": {"nvidia.com/gpu": 12}}
    assert w.cache.owned.pods_of(("llm", "a"))
    w.queued()

    h.on_namespace("MODIFIED", namespace("llm", deleting=True))
    assert ("llm", "a") not in w.cache.owned.glmdeployments
    assert w.queued() == [("llm", "a")], "one last run, which finds it gone and forgets its metrics"
    assert not w.cache.owned.pods_of(("llm", "a"))
    assert w.cache.gpus_used() == {}, "pods of a namespace being deleted hold no GPUs in a plan"
    assert ("llm", "gw") not in w.gateways.bodies
    assert ("llm-other", "b") in w.cache.owned.glmdeployments, "other namespaces are untouched"

    # Events still on their way, and a status write's answer, store nothing again.
    h.on_glmdeployment("MODIFIED", glmd("a", rv="2"))
    h.on_pod("MODIFIED", pod("p1", "n1", 8, owner="a"))
    w.cache.owned.set_glmdeployment(glmd("a", rv="3"))
    assert ("llm", "a") not in w.cache.owned.glmdeployments
    assert w.cache.gpus_used() == {}
    assert w.queued() == []

    # Gone, then made again under the same name: served as any namespace.
    h.on_namespace("DELETED", namespace("llm", deleting=True))
    h.on_namespace("ADDED", namespace("llm", deleting=False))
    h.on_glmdeployment("ADDED", glmd("a", rv="9"))
    assert ("llm", "a") in w.cache.owned.glmdeployments and w.queued() == [("llm", "a")]
