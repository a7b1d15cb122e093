"""Which keys watch events enqueue, and when: a spec change at once, a burst of pod events once."""

from __future__ import annotations

from typing import Any

from glm_operator.controller.event_handlers import ROUTINE_DELAY
from tests.harness.controller import drain, wired

KEY = ("llm", "g")


def glmd(rv: str) -> dict[str, Any]:
    return {
        "apiVersion": "inference.glm.dev/v1alpha1",
        "kind": "GLMDeployment",
        "metadata": {"name": "g", "namespace": "llm", "uid": "u", "resourceVersion": rv, "generation": 1},
        "spec": {"model": {"id": "zai-org/glm-4-9b-chat"}},
    }


def pod(rv: str, phase: str) -> dict[str, Any]:
    labels = {"app.kubernetes.io/managed-by": "glm-operator", "inference.glm.dev/deployment": "g"}
    return {
        "metadata": {"name": "g-x", "namespace": "llm", "uid": "p", "resourceVersion": rv, "labels": labels},
        "spec": {"nodeName": "n1", "containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": phase},
    }


def test_a_spec_change_runs_at_once_and_its_own_echo_not_again() -> None:
    w = wired()
    w.handlers.on_glmdeployment("ADDED", glmd("5"))
    assert drain(w.queue) == [KEY]
    w.handlers.on_glmdeployment("MODIFIED", glmd("5"))  # the echo of a version already cached
    assert drain(w.queue) == []


def test_the_events_of_a_pod_starting_run_one_reconcile_after_the_routine_delay() -> None:
    w = wired()
    for rv, phase in (("1", "Pending"), ("2", "Pending"), ("3", "Running"), ("4", "Running")):
        w.handlers.on_pod("MODIFIED", pod(rv, phase))
    assert drain(w.queue) == [], "nothing before the delay"
    w.clock.advance(ROUTINE_DELAY)
    assert drain(w.queue) == [KEY]
    assert w.cache.owned.pods_of(KEY)[0]["status"]["phase"] == "Running", "the cache has the last one"
    w.handlers.on_glmdeployment("ADDED", glmd("7"))
    w.handlers.on_pod("MODIFIED", pod("5", "Running"))
    assert drain(w.queue) == [KEY], "a spec change does not wait for the pod's delay"
