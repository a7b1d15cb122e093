"""The controller bench (benchmarks/controller_bench.py) as a module, for the tests of its parts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def controller_bench() -> Any:
    path = ROOT / "benchmarks" / "controller_bench.py"
    spec = importlib.util.spec_from_file_location("controller_bench", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("controller_bench", module)
    spec.loader.exec_module(module)
    return module
