"""``glm-operator loadtest`` runs where only its HTTP side is installed.

The GPU device's harness (benchmarks/gpu_truth/device/run_cases.sh) imports the loadtest command alone on a
machine without the kubernetes client, and a user may load-test any endpoint from a laptop: only ``--record``
needs the cluster. A sweep of the 2026-12-07 H100 hold was lost when ``--record`` pulled the kubernetes
client into the command's imports.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

OPERATOR = Path(__file__).resolve().parents[2] / "operator"

# the device's import of the command (run_cases.sh's LOADTEST), with the kubernetes client made unimportable
PROBE = """
import sys
sys.modules["kubernetes"] = None  # import kubernetes -> ImportError, as on a machine without it
import argparse
from glm_operator.commands import loadtest
parser = argparse.ArgumentParser(prog="loadtest")
loadtest.register(parser.add_subparsers())
args = parser.parse_args(["loadtest", "--url", "http://127.0.0.1:9", "--model", "m", "--concurrency", "1"])
print("parsed", args.concurrency, "kubernetes" in sys.modules and sys.modules["kubernetes"] is not None)
"""


def test_the_load_test_imports_without_the_kubernetes_client() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={"PYTHONPATH": str(OPERATOR)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("parsed") and done.stdout.strip().endswith("False")


def test_record_still_needs_and_finds_the_client() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import glm_operator.commands.loadtest_record as r; print(r.KubeClient.__name__)",
        ],
        env={"PYTHONPATH": str(OPERATOR)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.strip() == "KubeClient", done.stderr
