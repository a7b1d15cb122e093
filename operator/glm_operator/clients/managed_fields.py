"""Hand the fields a manager set by create/update over to its server-side-apply entry.

A child that does not exist yet is created with POST: on the apiserver that is one etcd write,
where a server-side apply of an absent object first reads it from etcd (``GuaranteedUpdate``'s
``getCurrentState``) and then writes, two round trips; on a loaded control plane those round
trips were most of an apply's time. But fields set by a create are owned by an ``Update`` entry
of the manager in ``metadata.managedFields``, and later applies never prune them (the apply entry
never owned them). As client-go's ``csaupgrade`` does, the ``Update`` entry's fields are merged
into the manager's ``Apply`` entry (or the entry becomes the ``Apply`` entry), in a JSON patch
guarded by the object's ``resourceVersion``. Pure functions: the request is ``KubeClient``'s.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def _is_entry(entry: Any, manager: str, operation: str) -> bool:
    return (
        isinstance(entry, dict)
        and entry.get("manager") == manager
        and entry.get("operation") == operation
        and not entry.get("subresource")
    )


def owns_by_update(obj: Mapping[str, Any], manager: str) -> bool:
    """Whether ``manager`` owns fields of ``obj`` through create/update (not through apply)."""
    entries = (obj.get("metadata") or {}).get("managedFields") or []
    return any(_is_entry(e, manager, "Update") for e in entries)


def union_fields(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """The union of two ``fieldsV1`` sets (tries keyed ``f:``/``k:``/``v:``/``i:``/``.``)."""
    out = copy.deepcopy(dict(a))
    for key, value in b.items():
        if isinstance(out.get(key), dict) and isinstance(value, Mapping):
            out[key] = union_fields(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def upgraded_managed_fields(obj: Mapping[str, Any], manager: str) -> list[dict[str, Any]] | None:
    """``metadata.managedFields`` with ``manager``'s ``Update`` entries merged into its ``Apply``
    entry (the first ``Update`` entry becomes it when there is none); None when nothing changes."""
    entries = [dict(e) for e in (obj.get("metadata") or {}).get("managedFields") or []]
    updates = [e for e in entries if _is_entry(e, manager, "Update")]
    if not updates:
        return None
    applied = next((e for e in entries if _is_entry(e, manager, "Apply")), None)
    if applied is None:
        applied = updates[0]
        applied["operation"] = "Apply"
        updates = updates[1:]
    fields: dict[str, Any] = dict(applied.get("fieldsV1") or {})
    for entry in updates:
        fields = union_fields(fields, entry.get("fieldsV1") or {})
    applied["fieldsV1"] = fields
    applied["fieldsType"] = "FieldsV1"
    return [e for e in entries if not any(e is u for u in updates)]


def upgrade_patch(obj: Mapping[str, Any], manager: str) -> list[dict[str, Any]] | None:
    """The JSON patch (RFC 6902) that makes ``upgraded_managed_fields`` the object's, only if it
    is still at the ``resourceVersion`` it was computed from; None when nothing is to move."""
    entries = upgraded_managed_fields(obj, manager)
    if entries is None:
        return None
    version = (obj.get("metadata") or {}).get("resourceVersion")
    return [
        {"op": "test", "path": "/metadata/resourceVersion", "value": version},
        {"op": "replace", "path": "/metadata/managedFields", "value": entries},
    ]
