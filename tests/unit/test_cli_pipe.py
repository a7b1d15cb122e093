"""A reader that goes away (``glm-operator plan ... | head``) ends every command quietly: no
traceback, and the status a shell gives a tool that SIGPIPE ended (141), as ``yes | head`` does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONSOLE_SCRIPT = Path(sys.executable).parent / "glm-operator"  # the one pip installed
SAMPLE = ROOT / "manifests" / "samples" / "glm-4.5-air.yaml"
NODES = ROOT / "tests" / "fixtures" / "gpu-cluster.yaml"


GLM_OPERATOR = [str(CONSOLE_SCRIPT)]
DEVTOOLS = [sys.executable, "-m", "devtools"]  # the generators' entry point, run from the checkout


@pytest.mark.parametrize(
    "argv",
    [
        [*GLM_OPERATOR, "plan", "-f", str(SAMPLE), "--nodes", str(NODES)],
        [*GLM_OPERATOR, "plan", "-f", str(SAMPLE), "--nodes", str(NODES), "-o", "json"],
        [*DEVTOOLS, "crd"],
    ],
    ids=["plan", "plan-json", "devtools-crd"],
)
def test_a_reader_that_went_away_ends_the_command_quietly(argv: list[str]) -> None:
    """The pipe's reader is closed before the command writes (deterministic, where a reader that
    closes after some lines races with the writer)."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        done = subprocess.run(argv, cwd=ROOT, stdout=writer, stderr=subprocess.PIPE, timeout=60, check=False)
    finally:
        os.close(writer)
    err = done.stderr.decode()
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert err == ""
    assert done.returncode == 128 + signal.SIGPIPE
