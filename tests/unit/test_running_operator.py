"""RunningOperator (the e2e tests' operator process) keeps the arguments and environment it was
started with across restarts: a restart that dropped ``--node-grace-seconds`` would change what the
later tests run against without a word. No cluster: the operator's command line is recorded and a
small Python process stands in for it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest

from tests.harness import operator as operator_module
from tests.harness.cluster import LocalCluster, wait_for
from tests.harness.operator import RunningOperator

GRACE = ("--node-grace-seconds", "80")


def stand_in(monkeypatch: pytest.MonkeyPatch, code: str) -> list[tuple[list[str], dict[str, str]]]:
    """Every launch's (argv, env) from now on; a process running ``code`` is started instead."""
    launches: list[tuple[list[str], dict[str, str]]] = []
    real_popen = subprocess.Popen

    def popen(argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        launches.append((list(argv), dict(kwargs["env"])))
        return real_popen([sys.executable, "-c", code], **{**kwargs, "env": None})

    monkeypatch.setattr(operator_module.subprocess, "Popen", popen)
    return launches


def extra_args(argv: list[str]) -> list[str]:
    """What came after the harness's own arguments (which end with ``--log-level info``)."""
    return argv[argv.index("--log-level") + 2 :]


def operator(tmp_path: Path) -> RunningOperator:
    return RunningOperator(cast(LocalCluster, None), tmp_path)


def test_a_restart_on_exit_keeps_the_arguments_and_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    launches = stand_in(monkeypatch, "raise SystemExit(3)")
    op = operator(tmp_path)
    op.start(*GRACE, env={"GLM_TEST_MARK": "1"})
    try:
        with op.restarted_on_exit() as codes:
            wait_for(lambda: len(launches) >= 3, 20, "two restarts")
    finally:
        op.stop()
    assert codes[:2] == [3, 3]
    for argv, env in launches:
        assert extra_args(argv) == list(GRACE)
        assert env["GLM_TEST_MARK"] == "1"


def test_start_again_reuses_what_the_last_start_was_given_unless_told_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    launches = stand_in(monkeypatch, "import time; time.sleep(60)")
    op = operator(tmp_path)
    for args, kwargs in [
        (GRACE, {"env": {"GLM_TEST_MARK": "1"}}),
        ((), {}),  # a test that stopped it starts it again: the same flags
        (("--prometheus-url", "http://p"), {"remember": False}),  # this run only
        ((), {}),
        (("--pod-monitor", "on"), {}),  # told otherwise: remembered from now on
        ((), {}),
    ]:
        op.start(*args, **kwargs)
        op.stop()
    assert [extra_args(argv) for argv, _ in launches] == [
        list(GRACE),
        list(GRACE),
        ["--prometheus-url", "http://p"],
        list(GRACE),
        ["--pod-monitor", "on"],
        ["--pod-monitor", "on"],
    ]
    assert [env.get("GLM_TEST_MARK") for _, env in launches] == ["1", "1", None, "1", None, None]
