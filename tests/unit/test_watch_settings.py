"""kopf settings the operator relies on: no diff base, because no handler needs one."""

from __future__ import annotations

import kopf

import glm_operator.handlers.gateway
import glm_operator.handlers.nodepools
import glm_operator.handlers.watches  # noqa: F401  (registers the handlers)
from glm_operator.controller.watch_settings import NoDiffBase, configure_watching


def test_no_changing_or_spawning_handler_so_no_diff_base_is_needed() -> None:
    registry = kopf.get_default_registry()
    assert list(registry._watching.get_all_handlers()), "the event handlers are registered"
    assert not list(registry._changing.get_all_handlers()), "on.create/update need kopf's diff base"
    assert not list(registry._spawning.get_all_handlers())
    settings = kopf.OperatorSettings()
    configure_watching(settings)
    assert isinstance(settings.persistence.diffbase_storage, NoDiffBase)
    body = kopf.Body({"metadata": {"name": "n", "labels": {"a": "b"}}, "spec": {"x": [1] * 1000}})
    assert settings.persistence.diffbase_storage.build(body=body) == {}
    assert settings.persistence.diffbase_storage.fetch(body=body) is None


def test_configure_watching_installs_the_watch_guard() -> None:
    from glm_operator.controller import watch_guard

    configure_watching(kopf.OperatorSettings())
    assert watch_guard.installed()
