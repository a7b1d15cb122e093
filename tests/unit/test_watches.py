"""The watch table and the kopf registry built from it: one ``on.event`` handler per watch, nothing
that would make kopf write to the watched objects, and events handed to the operator's loop."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf

from glm_operator.clients.watches import NoDiffBase
from glm_operator.controller.watches import WATCHES, registry, settings
from tests.harness.controller import wired


def test_one_event_handler_per_watch_and_no_handler_that_writes_to_objects() -> None:
    reg = registry(wired().handlers, asyncio.new_event_loop())
    # Tests may look inside kopf's registry; the operator's code uses kopf's public API only.
    assert len(list(reg._watching.get_all_handlers())) == len(WATCHES)
    assert not list(reg._changing.get_all_handlers()), "on.create/update keep progress annotations"
    assert not list(reg._spawning.get_all_handlers()), "timers and daemons add finalizers"
    assert [h.id for h in reg._activities.get_all_handlers()] == ["login_via_client"]


def test_settings_filter_children_on_the_server_and_build_no_diff_base() -> None:
    s = settings()
    assert not s.posting.enabled
    assert isinstance(s.persistence.diffbase_storage, NoDiffBase)
    body = kopf.Body({"metadata": {"name": "n", "labels": {"a": "b"}}, "spec": {"x": [1] * 1000}})
    assert s.persistence.diffbase_storage.build(body=body) == {}
    selected = {w.plural for w in WATCHES if w.server_selector}
    assert selected == {
        "deployments", "services", "poddisruptionbudgets", "leaderworkersets", "podmonitors",
        "inferencepools", "serviceaccounts", "roles", "rolebindings", "configmaps",
    }  # fmt: skip
    for plural in selected:
        assert "app.kubernetes.io/managed-by=glm-operator" in str(s.watching.label_selectors), plural


def test_a_handler_hands_its_event_to_the_operator_loop() -> None:
    async def scenario() -> list[tuple[str | None, dict[str, Any]]]:
        loop = asyncio.get_running_loop()
        w = wired()
        seen: list[tuple[str | None, dict[str, Any]]] = []
        w.handlers.on_node = lambda event_type, obj: seen.append((event_type, obj))  # type: ignore[method-assign]
        reg = registry(w.handlers, loop)
        (node_handler,) = [h for h in reg._watching.get_all_handlers() if "-nodes" in str(h.id)]
        node = {"metadata": {"name": "n1"}}
        await node_handler.fn(event={"type": "ADDED", "object": node})  # as kopf calls it, on its thread
        await node_handler.fn(event={"type": "BOOKMARK", "object": {}})
        await asyncio.sleep(0)
        return seen

    assert asyncio.run(scenario()) == [("ADDED", {"metadata": {"name": "n1"}})]


def test_kopfs_record_of_a_404_watcher_loses_its_traceback_and_the_signal_note_is_dropped() -> None:
    import logging
    import sys

    from glm_operator.clients.watches import restart_log_filter

    class APINotFoundError(Exception):  # kopf's class of that name, as the filter sees it
        pass

    try:
        raise APINotFoundError("404 page not found")
    except APINotFoundError:
        failed = logging.LogRecord("kopf", logging.ERROR, "f", 1, "Watcher has failed", (), sys.exc_info())
    assert restart_log_filter(failed) and failed.exc_info is None and failed.levelname == "WARNING"
    try:
        raise ValueError("a real bug")
    except ValueError:
        bug = logging.LogRecord("kopf", logging.ERROR, "f", 1, "Handler has failed", (), sys.exc_info())
    assert restart_log_filter(bug) and bug.exc_info is not None and bug.levelname == "ERROR"
    note = logging.LogRecord("kopf", logging.WARNING, "f", 1, "OS signals are ignored: ...", (), None)
    assert not restart_log_filter(note)
