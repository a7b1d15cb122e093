"""The local apiserver's audit log (``LocalCluster(audit=True)``), read back as a timeline.

Each line is one write the apiserver answered: when, which client (its user agent names the
controller, ``kube-controller-manager/.../deployment-controller``), which object, and the answer's
code. :func:`timeline` counts them per few seconds after a moment (an apiserver's return), so a
test can print where the time goes between a spec change and Ready pods, and which writes failed
(409 conflicts: a controller writing from a stale cache).
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class AuditEvent:
    at: dt.datetime
    client: str  # the controller (last part of the user agent) or the program
    verb: str
    resource: str  # replicasets, pods/binding, ...
    namespace: str
    name: str
    code: int


def _client(user_agent: str) -> str:
    """``kube-controller-manager/v1.34.4 (linux/amd64) kubernetes/abc/deployment-controller`` ->
    ``deployment-controller``; ``kwok/v0.8.0 ...`` -> ``kwok``."""
    head, _, rest = user_agent.partition(" ")
    tail = rest.rsplit("/", 1)[-1] if rest.count("/") >= 2 else ""
    return tail if head.startswith("kube-controller-manager") and tail else head.split("/", 1)[0]


def read_audit_log(path: Path) -> list[AuditEvent]:
    events = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        ref = entry.get("objectRef") or {}
        resource = ref.get("resource", "")
        if ref.get("subresource"):
            resource += "/" + ref["subresource"]
        at = dt.datetime.fromisoformat(entry["stageTimestamp"].replace("Z", "+00:00"))
        events.append(
            AuditEvent(
                at=at,
                client=_client(entry.get("userAgent", "")),
                verb=entry.get("verb", ""),
                resource=resource,
                namespace=ref.get("namespace", ""),
                name=ref.get("name", ""),
                code=int((entry.get("responseStatus") or {}).get("code", 0)),
            )
        )
    return events


def timeline(
    events: Iterable[AuditEvent],
    since: dt.datetime,
    namespace: str,
    bucket: float = 5.0,
    until: float = 120.0,
) -> str:
    """Writes in ``namespace`` (and to nodes) from ``since`` on, counted per ``bucket`` seconds:
    one line per bucket, ``client verb resource code xN``."""
    rows: dict[int, Counter[str]] = {}
    for event in events:
        offset = (event.at - since).total_seconds()
        if not 0 <= offset < until or event.namespace not in (namespace, ""):
            continue
        key = f"{event.client} {event.verb} {event.resource} {event.code}"
        rows.setdefault(int(offset // bucket), Counter())[key] += 1
    lines = []
    for index in sorted(rows):
        counts = ", ".join(f"{key} x{n}" for key, n in sorted(rows[index].items()))
        lines.append(f"+{index * bucket:>5.0f} s  {counts}")
    return "\n".join(lines)


def conflicts(events: Iterable[AuditEvent], since: dt.datetime, namespace: str) -> Counter[str]:
    """409 answers after ``since`` in ``namespace``, per client and resource."""
    return Counter(
        f"{e.client} {e.resource}"
        for e in events
        if e.code == 409 and e.at >= since and e.namespace == namespace
    )
