"""Which operator method each directly delivered watch event reaches (controller.watch_guard), with
the label filters of the kopf handlers it stands in for. The e2e suite runs it for real."""

from __future__ import annotations

from typing import Any

import kopf

from glm_operator.handlers import gateway as gateway_handlers  # noqa: F401  (registers its handlers)
from glm_operator.handlers.watches import direct_deliveries

MANAGED = {"app.kubernetes.io/managed-by": "glm-operator"}


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None, str]] = []
        self.gateways = self

    def _record(self, what: str, event_type: str | None, obj: dict[str, Any]) -> None:
        self.calls.append((what, event_type, obj["metadata"]["name"]))

    def on_glmdeployment(self, event_type: str | None, obj: dict[str, Any]) -> None:
        self._record("glmdeployment", event_type, obj)

    def on_node(self, event_type: str | None, obj: dict[str, Any]) -> None:
        self._record("node", event_type, obj)

    def on_pod(self, event_type: str | None, obj: dict[str, Any]) -> None:
        self._record("pod", event_type, obj)

    def on_child(self, event_type: str | None, obj: dict[str, Any], api_version: str, kind: str) -> None:
        self._record(f"child {api_version} {kind}", event_type, obj)

    def on_gateway_deployment(self, event_type: str | None, obj: dict[str, Any]) -> None:
        self._record("gateway deployment", event_type, obj)


def obj(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}}


def test_each_kind_reaches_its_handler_with_the_kopf_handlers_label_filters() -> None:
    op = Recorder()
    deliver = direct_deliveries(op)  # type: ignore[arg-type]
    deliver[("inference.glm.dev", "glmdeployments")]("ADDED", obj("g"))
    deliver[("", "nodes")](None, obj("n"))
    deliver[("", "pods")]("MODIFIED", obj("p"))
    deliver[("", "services")]("ADDED", obj("mine", **MANAGED))
    deliver[("", "services")]("ADDED", obj("not-mine"))
    deliver[("policy", "poddisruptionbudgets")]("DELETED", obj("pdb", **MANAGED))
    deliver[("apps", "deployments")]("ADDED", obj("d", **MANAGED))
    deliver[("apps", "deployments")](
        "ADDED", obj("gw", **MANAGED, **{"app.kubernetes.io/name": "glm-gateway"})
    )
    deliver[("leaderworkerset.x-k8s.io", "leaderworkersets")]("ADDED", obj("lws", **MANAGED))
    assert op.calls == [
        ("glmdeployment", "ADDED", "g"),
        ("node", None, "n"),
        ("pod", "MODIFIED", "p"),
        ("child v1 Service", "ADDED", "mine"),
        ("child policy/v1 PodDisruptionBudget", "DELETED", "pdb"),
        ("child apps/v1 Deployment", "ADDED", "d"),
        ("gateway deployment", "ADDED", "gw"),
        ("child apps/v1 Deployment", "ADDED", "gw"),
        ("child leaderworkerset.x-k8s.io/v1 LeaderWorkerSet", "ADDED", "lws"),
    ]


def test_every_directly_delivered_kind_has_a_kopf_handler_so_kopf_watches_it() -> None:
    registered = {
        (h.selector.group, h.selector.plural or h.selector.any_name)
        for h in kopf.get_default_registry()._watching.get_all_handlers()
    }
    assert set(direct_deliveries(Recorder())) <= registered  # type: ignore[arg-type]
