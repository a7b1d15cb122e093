"""Print the fit model's errors against real vLLM start-ups.

Usage: .venv/bin/python benchmarks/calibration/fit_errors.py [--refit] [--no-lomo]

Part 1, tests/fixtures/vllm-startups.csv (benchmarks/calibration/fit_truth.py): end-to-end KV-token error
per row with the shipped budget constants, then median / p90 / worst (and the worst over-promise: ours
above the log) by model family, in sample and leave-one-model-out (the free constants refitted without
each model in turn, that model's rows predicted). Rows whose KV budget is under 5 % of the GPU are reported
apart (there any budget error dominates). The three engine generations (ReleaseRules.generation) are
fitted and reported apart: vLLM < 0.18, 0.18-0.19 (graphs profiled but not subtracted, FlashInfer's fusion
workspace) and >= 0.20 (the CUDA-graph estimate in the budget; the operator's default image). --refit
prints the constants fitted on each generation's rows (what planning/memory/constants.py ships). The V1
model runner's logged CUDA-graph estimates (vLLM 0.19-0.26) are printed against ours, and --refit also
prints their least-squares constants (graphs_mid.*, graphs_v1.*). The vLLM < 0.18 MoE rows then show the
Triton fused-MoE scratch their engine allocates (planning.memory.workspaces.triton_fused_moe_bytes, from
vLLM's source) next to the fitted residual the budget adds and the forward / sampler terms it sits beside.

Part 2, tests/fixtures/fit-examples.csv (one line per figure):

Rows and inputs are the USED cases of benchmarks/calibration/fit_examples.py (the same cases
tests/unit/test_fit_examples.py asserts on, so the table and the assertions never disagree). "e2e" lines
compute the KV budget ourselves from the GPU's memory and utilisation instead of taking the logged
"Available KV cache memory".
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _load_cases() -> ModuleType:
    sys.path.insert(0, str(ROOT))
    return importlib.import_module("benchmarks.calibration.fit_examples")


def _load_truth() -> ModuleType:
    sys.path.insert(0, str(ROOT))
    return importlib.import_module("benchmarks.calibration.fit_truth")


def _table(lines: list[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in lines) for i in range(len(lines[0]))]
    for r in lines:
        print(" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))


def _marks(truth: ModuleType, e: Any) -> str:
    """'*': the refit cannot pin this row's constants; '†': the row is never fitted on."""
    blind = "*" if e.uninformed else ""
    return blind + ("†" if e.startup.id in truth.NOT_FITTED else "")


def _generation(truth: ModuleType, label: str, rows: list, lomo: bool) -> tuple[list, list]:
    """Per-row errors, then median / p90 / worst by family, in sample and leave-one-model-out (returned)."""
    print(f"== {label}: {len(rows)} start-ups used ==")
    by_family: dict[str, int] = {}
    for s in rows:
        by_family[s.family] = by_family.get(s.family, 0) + 1
    print("rows by family:", ", ".join(f"{k} {v}" for k, v in sorted(by_family.items())))
    in_sample = [truth.row_error(s) for s in rows]
    held_out = {e.startup.id: e for e in truth.leave_one_model_out(rows)} if lomo else {}
    lines = [("row", "vLLM", "TP/PP", "figure", "ours", "logged", "error %", "LOMO %", "budget err GiB")]
    for e in in_sample:
        h = held_out.get(e.startup.id)
        lines.append(
            (
                e.startup.id,
                ".".join(map(str, e.startup.vllm_version or ())) or "?",
                f"{e.startup.tp}/{e.startup.pp}",
                e.figure,
                f"{e.ours:,.2f}",
                f"{e.logged:,.2f}",
                f"{100 * e.relative:+.2f}",
                f"{100 * h.relative:+.2f}{_marks(truth, h)}" if h else "-",
                f"{e.budget_error_gib:+.2f}" if e.budget_error_gib is not None else "-",
            )
        )
    _table(lines)
    not_fitted = [s.id for s in rows if s.id in truth.NOT_FITTED]
    if not_fitted:
        print("  † never fitted on (memory the budget does not model; NOT_FITTED):", ", ".join(not_fitted))
    print()
    for kind, errors in (("in sample", in_sample), ("leave-one-model-out", list(held_out.values()))):
        if not errors:
            continue
        blind = [e for e in errors if e.uninformed]
        normal = [e for e in errors if not e.startup.small_budget and not e.uninformed]
        small = [e for e in errors if e.startup.small_budget and not e.uninformed]
        families = sorted({e.startup.family for e in normal})
        out = [("errors " + kind, "rows", "median %", "p90 %", "worst %", "worst over-promise %")]
        for fam in [*families, "all"]:
            sel = [e.relative for e in normal if fam in ("all", e.startup.family)]
            med, p90, worst = truth.summary(sel)
            over = max([0.0, *sel])
            out.append(
                (
                    fam,
                    str(len(sel)),
                    f"{100 * med:.2f}",
                    f"{100 * p90:.2f}",
                    f"{100 * worst:.2f}",
                    f"{100 * over:.2f}",
                )
            )
        _table(out)
        for e in small:
            unit = "GiB" if e.figure == "budget" else e.figure
            print(
                f"  KV budget < 5 % of the GPU: {e.startup.id}: ours {e.ours:,.2f} vs logged {e.logged:,.2f} "
                f"{unit} (budget {e.budget_error_gib:+.2f} GiB)"
            )
        for e in blind:
            print(
                f"  not a prediction (the other rows cannot pin down {', '.join(e.uninformed)}): "
                f"{e.startup.id}: {100 * e.relative:+.2f} %"
            )
        print()
    return in_sample, list(held_out.values())


def graphs(truth: ModuleType, refit: bool) -> None:
    """The V1 runner's logged "Estimated CUDA graph memory" against ours (cuda_graphs.cudagraph_bytes)."""
    rows = truth.graph_estimate_startups()
    print(f"== CUDA-graph estimate, V1 model runner (vLLM 0.19-0.26): {len(rows)} logged ==")
    lines = [("row", "vLLM", "TP/PP", "logged GiB", "ours GiB", "error GiB")]
    errors = []
    for s in rows:
        ours = s.fit().cudagraph_capture_gib
        errors.append(ours - s.logged_graph_gib)
        version = ".".join(map(str, s.vllm_version)) if s.vllm_version else "?"
        logged = f"{s.logged_graph_gib:.2f}"
        lines.append((s.id, version, f"{s.tp}/{s.pp}", logged, f"{ours:.2f}", f"{errors[-1]:+.2f}"))
    _table(lines)
    for label, newer in (("0.19", False), (">= 0.20", True)):
        errs = [e for e, s in zip(errors, rows, strict=True) if s.newer_engine == newer]
        rms = (sum(e * e for e in errs) / len(errs)) ** 0.5
        print(f"vLLM {label} (its own constants): rms {rms:.2f} GiB, worst {max(errs, key=abs):+.2f} GiB")
    if refit:
        from glm_operator.planning.memory.constants import constant

        c = truth.fit_graph_constants(rows)
        for names in truth.GRAPH_CONSTANTS.values():
            print(
                "fitted: "
                + ", ".join(f"{n} {constant(c, n) / (1 if 'dsa' in n else 2**20):.4f}" for n in names)
            )
        fp8_online = truth.fit_fp8_online_graph_bytes(rows, c) / 2**20
        print(f"fitted: fp8_online_mla_graph_bytes_per_layer {fp8_online:.2f}")
    print()


def moe_scratch(truth: ModuleType) -> None:
    """vLLM < 0.18 MoE rows: the source's fused-MoE scratch against the fitted residual."""
    from glm_operator.planning.memory.activation import forward_peak_bytes, sampler_peak_bytes
    from glm_operator.planning.memory.constants import GIB
    from glm_operator.planning.memory.settings import BudgetSettings
    from glm_operator.planning.memory.workspaces import moe_workspace_bytes, triton_fused_moe_bytes

    with truth.CSV_PATH.open(encoding="utf-8") as fh:
        notes = {r["id"]: r["notes"] + " " + r["quantization"] for r in csv.DictReader(fh)}
    # the rows whose experts run vLLM's Triton fused_experts_impl (MXFP4 and Marlin take other kernels)
    rows = [
        s
        for s in truth.used_startups()
        if s.resolved().architecture.is_moe and not any(q in notes[s.id] for q in ("mxfp4", "Marlin"))
    ]
    ep_models = {s.model_id for s in rows if "--enable-expert-parallel" in notes[s.id]}
    out = [
        ("row", "vLLM", "TP", "EP", "experts", "forward", "sampler", "MoE scratch (source)", "residual added")
    ]
    for s in rows:
        arch = s.resolved().architecture
        cc = next((v for k, v in truth.COMPUTE_CAPABILITY.items() if k in s.gpu), 9.0)
        newer = (s.vllm_version or (0, 0)) >= (0, 12)
        fp8 = "block 128" in notes[s.id]
        ep = s.model_id in ep_models
        settings = BudgetSettings(s.max_num_batched_tokens, s.max_num_seqs, s.flashinfer_sampler)
        scratch = triton_fused_moe_bytes(
            arch,
            s.tp,
            s.max_num_batched_tokens,
            expert_parallel=ep,
            fp8_block=128 if fp8 else None,
            out_of_place=newer,
            chunk_size=16384 if newer else 32768,
        )
        gib = [
            forward_peak_bytes(arch, s.tp, settings),
            sampler_peak_bytes(arch, settings),
            scratch,
            moe_workspace_bytes(arch, s.tp, compute_capability=cc),
        ]
        version = ".".join(map(str, s.vllm_version or ())) or "?"
        experts = "fp8 b128" if fp8 else "bf16"
        out.append(
            (s.id, version, str(s.tp), "yes" if ep else "no", experts, *(f"{v / GIB:.2f}" for v in gib))
        )
    print("== vLLM < 0.18 MoE rows: fused-MoE scratch by vLLM's source vs the fitted residual (GiB) ==")
    _table(out)
    print("  the scratch is freed before the sampler step: where the sampler is the peak it adds nothing")
    print()


def startups(refit: bool, lomo: bool) -> None:
    truth = _load_truth()
    older, mid, newer = truth.used_startups(), truth.mid_engine_startups(), truth.newer_engine_startups()
    everything = older + mid + newer
    print(f"== {len(everything)} vLLM start-ups used (tests/fixtures/vllm-startups.csv) ==")
    for label, key in (
        ("family", lambda s: s.family),
        ("GPU", lambda s: s.gpu),
        ("GPUs per instance", lambda s: str(s.tp * s.pp)),
        ("vLLM", lambda s: ".".join(map(str, s.vllm_version or ())) or "?"),
    ):
        counts: dict[str, int] = {}
        for s in everything:
            counts[key(s)] = counts.get(key(s), 0) + 1
        print(f"by {label}:", ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    print()
    results = [
        _generation(truth, "vLLM < 0.18 (constants: forward_scale, sampler_bytes_*, ...)", older, lomo),
        _generation(
            truth, "vLLM 0.18-0.19 (constants: mid_*; graphs not subtracted; fusion workspace)", mid, lomo
        ),
        _generation(
            truth,
            "vLLM >= 0.20 (constants: newer_*; the operator's 0.33.0 is planned with these)",
            newer,
            lomo,
        ),
    ]
    out = [("all generations", "rows", "median %", "p90 %", "worst %", "worst over-promise %")]
    for kind, index in (("in sample", 0), ("leave-one-model-out", 1)):
        sel = [e.relative for r in results for e in r[index] if not (e.startup.small_budget or e.uninformed)]
        if not sel:
            continue
        med, p90, worst = truth.summary(sel)
        over = max([0.0, *sel])
        out.append((kind, str(len(sel)), *(f"{100 * v:.2f}" for v in (med, p90, worst, over))))
    print("== every generation, its own constants (KV budget >= 5 % of the GPU) ==")
    _table(out)
    print()
    graphs(truth, refit)
    moe_scratch(truth)
    if refit:
        print("constants fitted on the vLLM < 0.18 rows:", truth.fit_constants(older))
        print("constants fitted on the vLLM 0.18-0.19 rows:", truth.fit_constants(mid))
        print("constants fitted on the vLLM >= 0.20 rows:", truth.fit_constants(newer))
        print()


def examples() -> None:
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
    print(
        "not used:",
        ", ".join(f"row {k}" for k in sorted(cases.NOT_USED)),
        "(reasons in benchmarks/calibration/fit_examples.py)",
    )
    print("structure only:", "; ".join(f"row {k}: {v}" for k, v in cases.STRUCTURE_ROWS.items()))
    return 0


def components() -> None:
    """Per component, ours against what the log splits out (rows that log "Actual usage is ...": the H200
    start-ups of benchmarks/gpu_truth), GiB: weights, peak activation, non-torch, the CUDA-graph estimate
    the budget subtracts (V1 runner; 0.26's Model Runner V2 subtracts none)."""
    truth = _load_truth()
    rows = [
        s for s in truth.load_startups() if s.use and s.logged_activation_gib is not None and s.newer_engine
    ]
    if not rows:
        return
    print("== components (ours - logged, GiB; rows whose log splits the budget) ==")
    lines = [("row", "weights", "activation", "non-torch", "graph estimate")]
    for s in rows:
        f = s.fit()
        pairs = (
            (f.weights_gib_per_gpu, s.logged_weights_gib),
            (f.activation_gib, s.logged_activation_gib),
            (f.non_torch_gib, s.logged_non_torch_gib),
            (f.cudagraph_gib, s.logged_graph_gib or 0.0),
        )
        cells = (f"{o:.2f} vs {g:.2f} ({o - g:+.2f})" if g is not None else "-" for o, g in pairs)
        lines.append((s.id, *cells))
    _table(lines)
    print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--refit", action="store_true", help="print the constants fitted on all rows")
    parser.add_argument("--no-lomo", action="store_true", help="skip the leave-one-model-out refits")
    args = parser.parse_args()
    startups(args.refit, not args.no_lomo)
    components()
    print("== tests/fixtures/fit-examples.csv ==")
    examples()
    return 0


if __name__ == "__main__":
    sys.exit(main())
