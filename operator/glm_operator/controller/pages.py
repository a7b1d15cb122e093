"""Read-only plan pages on the metrics port: ``/plans/`` and ``/plans/<namespace>/<name>``.

The reconciler hands over, after each status write, the plan it computed and the status it wrote
(``record``); a deleted GLMDeployment is forgotten. A request renders the page of the latest one
(``glm_operator.render.plan_page``, the page ``glm-operator plan --output html`` writes). Nothing
here reads the apiserver or a Secret: the page shows what ``status`` already shows, laid out.
Only the leader reconciles, so a standby's index is empty and says so.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from glm_operator.controller.workqueue import Key
from glm_operator.planning.placement.result import Plan
from glm_operator.render.plan_page import IndexEntry, render_index, render_plan_page

__all__ = ["PlanPages"]


@dataclass(frozen=True)
class _Entry:
    plan: Plan | None
    phase: str
    facts: tuple[tuple[str, str], ...]
    summary: str
    message: str


def _planned_message(status: Mapping[str, Any]) -> str:
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Planned" and condition.get("status") != "True":
            return str(condition.get("message") or "")
    return ""


class PlanPages:
    def __init__(self) -> None:
        self._lock = threading.Lock()  # written on the loop, read by the HTTP server's threads
        self._entries: dict[Key, _Entry] = {}

    def record(self, key: Key, plan: Plan | None, status: Mapping[str, Any]) -> None:
        """The plan of ``key``'s last reconcile and the status it wrote."""
        phase = str(status.get("phase") or "-")
        facts = (
            ("phase", phase),
            (
                "replicas ready / desired",
                f"{status.get('readyReplicas', 0)} / {status.get('desiredReplicas', '-')}",
            ),
            ("served model name", str(status.get("model") or "-")),
        )
        summary = str((status.get("plan") or {}).get("summary") or _planned_message(status))
        entry = _Entry(plan, phase, facts, summary, _planned_message(status))
        with self._lock:
            self._entries[key] = entry

    def forget(self, key: Key) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def respond(self, path: str) -> tuple[int, str]:
        """(HTTP status, HTML) for a path under /plans."""
        parts = [p for p in path.split("/") if p]
        if parts == ["plans"]:
            with self._lock:
                entries = sorted(self._entries.items())
            return 200, render_index([IndexEntry(ns, name, e.phase, e.summary) for (ns, name), e in entries])
        if len(parts) == 3 and parts[0] == "plans":
            with self._lock:
                entry = self._entries.get((parts[1], parts[2]))
            if entry is not None:
                html = render_plan_page(
                    entry.plan, title=f"{parts[1]}/{parts[2]}", facts=entry.facts, message=entry.message
                )
                return 200, html
        message = "This operator replica planned no GLMDeployment of that name: the list is at /plans/"
        return 404, render_plan_page(None, title=path, message=message)
