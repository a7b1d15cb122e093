"""Print the fit model's errors against tests/fixtures/fit-examples.csv (one line per figure).

Usage: .venv/bin/python benchmarks/fit_errors.py

Rows and inputs are the USED cases of tests/unit/test_fit_examples.py (loaded from that file so the
table and the assertions never disagree). "e2e" lines compute the KV budget ourselves from the GPU's
memory and utilisation instead of taking the logged "Available KV cache memory".
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _load_cases() -> ModuleType:
    path = ROOT / "tests" / "unit" / "test_fit_examples.py"
    spec = importlib.util.spec_from_file_location("fit_example_cases", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fit_example_cases"] = module
    spec.loader.exec_module(module)
    return module


def main() -> int:
    cases = _load_cases()
    lines = [("row", "model", "figure", "ours", "logged", "error %", "asserted")]
    for case in cases.USED:
        fit = case.fit()
        label = case.label
        if case.implied_bytes_per_token is not None:
            logged = case.implied_bytes_per_token
            ours = fit.kv_cache_bytes_per_token_per_gpu
            kind = "measured" if case.logged_bytes_per_token is not None else "implied"
            lines.append(
                (
                    str(case.row),
                    label,
                    f"KV B/token/GPU ({kind})",
                    f"{ours:,}",
                    f"{logged:,.0f}",
                    f"{100 * (ours - logged) / logged:+.2f}",
                    "<=3%",
                )
            )
        if case.logged_weights_gib is not None:
            ours_w = fit.weights_gib_per_gpu
            lines.append(
                (
                    str(case.row),
                    label,
                    "weights GiB/GPU",
                    f"{ours_w:.2f}",
                    f"{case.logged_weights_gib:.2f}",
                    f"{100 * (ours_w - case.logged_weights_gib) / case.logged_weights_gib:+.2f}",
                    "<=5%",
                )
            )
        if case.available_kv_gib is not None and case.logged_tokens:
            lines.append(
                (
                    str(case.row),
                    label,
                    f"KV tokens from {case.available_kv_gib} GiB",
                    f"{fit.kv_cache_tokens:,}",
                    f"{case.logged_tokens:,}",
                    f"{100 * (fit.kv_cache_tokens - case.logged_tokens) / case.logged_tokens:+.2f}",
                    "<=10%",
                )
            )
        if case.e2e is not None and case.logged_tokens:
            e2e = case.fit(end_to_end=True)
            asserted = "<=10%" if case.row in cases.E2E_ASSERTED else "no"
            lines.append(
                (
                    str(case.row),
                    label,
                    f"KV tokens e2e ({e2e.available_kv_cache_gib_per_gpu:.2f} GiB; {case.e2e.assumption})",
                    f"{e2e.kv_cache_tokens:,}",
                    f"{case.logged_tokens:,}",
                    f"{100 * (e2e.kv_cache_tokens - case.logged_tokens) / case.logged_tokens:+.2f}",
                    asserted,
                )
            )
    widths = [max(len(r[i]) for r in lines) for i in range(len(lines[0]))]
    for r in lines:
        print(" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    print()
    print("not used:", ", ".join(f"row {k}" for k in sorted(cases.NOT_USED)), "(reasons in the test module)")
    print("structure only:", "; ".join(f"row {k}: {v}" for k, v in cases.STRUCTURE_ROWS.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
