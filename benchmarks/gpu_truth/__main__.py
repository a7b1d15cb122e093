"""The H200 fit-truth harness (README.md beside this file).

python -m benchmarks.gpu_truth render [--run DIR] [--models DIR]   argv files + configs for the device
python -m benchmarks.gpu_truth rows [LOG...]                       CSV rows from start-up logs
python -m benchmarks.gpu_truth rows --update                       ... written into vllm-startups.csv
python -m benchmarks.gpu_truth compare                             glm-operator estimate vs the logs
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

from benchmarks.gpu_truth.cases import (
    BY_NAME,
    CASES,
    DEVICES,
    HERE,
    LOGS,
    VLLM_VERSION,
    Case,
)
from benchmarks.gpu_truth.logparse import StartupLog, parse, read_log

REPO = HERE.parents[1]
CSV_PATH = REPO / "tests" / "fixtures" / "vllm-startups.csv"
ROW_PREFIXES = tuple(d.row_prefix for d in DEVICES.values())
COLUMNS = [
    "id",
    "source_url",
    "model",
    "family",
    "gpu",
    "gpu_memory_gib",
    "nodes",
    "tp",
    "pp",
    "quantization",
    "kv_cache_dtype",
    "gpu_memory_utilization",
    "max_model_len",
    "max_num_batched_tokens",
    "max_num_seqs",
    "vllm_version",
    "cudagraphs",
    "sampler",
    "custom_all_reduce",
    "weights_gib",
    "activation_gib",
    "non_torch_gib",
    "graph_gib",
    "available_kv_gib",
    "kv_cache_tokens",
    "max_concurrency",
    "use",
    "notes",
    "model_runner",
    "graph_actual_gib",
    "graph_split_mib",
]


def _fmt(value: float | int | None) -> str:
    if value is None:
        return ""
    return str(value) if isinstance(value, int) else f"{value:g}"


def _quantization(case: Case) -> str:
    qc = case.config_json().get("quantization_config")
    if isinstance(qc, dict):
        method = qc.get("quant_method")
        if method == "fp8" and qc.get("weight_block_size"):
            return "fp8 (checkpoint block {}x{})".format(*qc["weight_block_size"])
        return f"{method} (checkpoint)"
    if case.quantization == "fp8":
        return "fp8 (online: --quantization fp8 on the bf16 config)"
    return "bf16"


def row(case: Case, log: StartupLog, log_name: str) -> dict[str, str]:
    """The CSV row of one start-up."""
    mnbt = log.max_num_batched_tokens or case.max_num_batched_tokens or 0
    mnbt_text = str(mnbt) if case.max_num_batched_tokens else f"{mnbt} (default, logged)"
    layers = case.config_json().get("num_hidden_layers")
    notes = [f"config benchmarks/gpu_truth/configs/{case.config} ({layers} layers)"]
    notes += [f"{key}={value}" for key, value in case.env.items()]
    notes += list(case.extra_args)
    if case.speculative_tokens:
        notes.append(f"--speculative-config {case.speculative_config()}")
    if log.error:
        notes.append(f"engine did not start: {log.error}")
    elif log.split_from_debug:
        notes.append(
            'log ends before "Actual usage": activation and non-torch from the DEBUG line "torch peak memory'
            ' increase: A GiB; non-torch forward increase memory: N GiB"'
        )
    elif log.cut_before_actual_usage:
        notes.append('log ends after the KV-cache lines, before "Actual usage" (no activation split)')
    return {
        "id": case.device.row_prefix + case.name,
        "source_url": f"benchmarks/gpu_truth/logs/{log_name} (this repository: vLLM {VLLM_VERSION} "
        f"--load-format dummy on one {case.gpu}, benchmarks/gpu_truth)",
        "model": case.model_id,
        "family": case.family,
        "gpu": case.device.csv_name,
        "gpu_memory_gib": f"{case.device.memory_gib:.2f}",
        "nodes": "1",
        "tp": "1",
        "pp": "1",
        "quantization": _quantization(case),
        "kv_cache_dtype": case.kv_cache_dtype,
        "gpu_memory_utilization": _fmt(case.gpu_memory_utilization),
        "max_model_len": str(case.context_length),
        "max_num_batched_tokens": mnbt_text,
        "max_num_seqs": str(case.max_num_seqs),
        "vllm_version": VLLM_VERSION,
        "cudagraphs": "default (FULL_AND_PIECEWISE; estimate subtracted since 0.21)",
        "sampler": "native" if case.native_sampler else "flashinfer",
        "custom_all_reduce": "n/a",
        "weights_gib": _fmt(log.weights_gib),
        "activation_gib": _fmt(log.activation_gib),
        "non_torch_gib": _fmt(log.non_torch_gib),
        "graph_gib": _fmt(log.graph_estimate_gib),
        "available_kv_gib": _fmt(log.available_kv_gib),
        "kv_cache_tokens": _fmt(log.kv_cache_tokens),
        "max_concurrency": _fmt(log.max_concurrency),
        "use": "yes" if log.complete else "no: the engine did not start",
        "notes": "; ".join(notes),
        "model_runner": log.model_runner,
        "graph_actual_gib": _fmt(log.graph_actual_gib),
        "graph_split_mib": log.graph_split_text,
    }


def committed_rows() -> list[dict[str, str]]:
    """The rows of every committed log of a known case, in CASES order."""
    out = []
    for case in CASES:
        path = LOGS / f"{case.name}.log.gz"
        if path.exists():
            out.append(row(case, parse(read_log(path)), path.name))
    return out


def _render(args: argparse.Namespace) -> int:
    run, models = Path(args.run), Path(args.models)
    (run / "argv").mkdir(parents=True, exist_ok=True)
    for case in CASES:
        (run / "argv" / f"{case.name}.args").write_text("\n".join(case.device_args()) + "\n")
        env = run / "env" / f"{case.name}.env"
        env.unlink(missing_ok=True)
        if case.env:
            env.parent.mkdir(parents=True, exist_ok=True)
            env.write_text("".join(f"{key}={value}\n" for key, value in case.env.items()))
        perf = run / "perf" / case.name
        perf.unlink(missing_ok=True)
        if case.sweeps:
            perf.parent.mkdir(parents=True, exist_ok=True)
            perf.write_text("".join(f"{sw.shape} {' '.join(sw.loadtest_args())}\n" for sw in case.sweeps))
        target = models / case.config
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(case.config_path, target / "config.json")
    shutil.copy(HERE / "device" / "run_cases.sh", run / "run_cases.sh")
    shutil.rmtree(run / "memtrace", ignore_errors=True)
    plugin = HERE / "device" / "memtrace"
    shutil.copytree(plugin, run / "memtrace", ignore=shutil.ignore_patterns("__pycache__"))
    print(f"{len(CASES)} cases: argv in {run / 'argv'}, configs in {models}")
    return 0


def _rows(args: argparse.Namespace) -> int:
    if args.logs:
        rows = []
        for name in args.logs:
            path = Path(name)
            case = BY_NAME[path.name.split(".log")[0]]
            rows.append(row(case, parse(read_log(path)), path.name))
    else:
        rows = committed_rows()
    if not args.update:
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        sys.stdout.write(out.getvalue())
        return 0
    with CSV_PATH.open(encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        fields = list(reader.fieldnames or [])
        kept = [r for r in reader if not r["id"].startswith(ROW_PREFIXES)]
    fields += [c for c in COLUMNS if c not in fields]
    with CSV_PATH.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows([{k: r.get(k, "") or "" for k in fields} for r in [*kept, *rows]])
    print(f"{len(rows)} device rows (h200-*, h100-*) written to {CSV_PATH}")
    return 0


def estimate(case: Case, mnbt: int | None) -> dict[str, float]:
    """``glm-operator estimate --vllm-version 0.26.0`` for the case (its JSON output)."""
    cmd = [
        sys.executable, "-m", "glm_operator.cli", "estimate",
        "--model", str(case.config_path),
        "--gpu-memory-gib", f"{case.device.memory_gib}",
        "--vllm-version", VLLM_VERSION,
        "--max-model-len", str(case.context_length),
        "--gpu-memory-utilization", str(case.gpu_memory_utilization),
        "--max-num-seqs", str(case.max_num_seqs),
        "--kv-cache-dtype", case.kv_cache_dtype,
        "--quantization", case.quantization,
        "--native-sampler" if case.native_sampler else "--flashinfer-sampler",
        "-o", "json",
    ]  # fmt: skip
    if mnbt:
        cmd += ["--max-num-batched-tokens", str(mnbt)]
    if case.model_runner:
        cmd += ["--model-runner", case.model_runner]
    if case.speculative_tokens:
        cmd += ["--speculative-config", case.speculative_config() or ""]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if not done.stdout.strip().startswith("{"):
        return {}
    value: dict[str, float] = json.loads(done.stdout)
    return value


def _compare(args: argparse.Namespace) -> int:
    head = f"{'case':28} {'runner':6} {'':6} {'weights':>8} {'activ.':>7} {'non-t.':>7} {'graphs':>7}"
    head += f" {'KV GiB':>7} {'tokens':>10}"
    print(head)
    for case in CASES:
        path = LOGS / f"{case.name}.log.gz"
        if not path.exists():
            continue
        log = parse(read_log(path))
        ours = estimate(case, log.max_num_batched_tokens or case.max_num_batched_tokens)
        figures = (log.weights_gib, log.activation_gib, log.non_torch_gib, log.graph_estimate_gib)
        print(
            f"{case.name:28} {log.model_runner:6} {'vLLM':6} "
            + " ".join(f"{_fmt(x):>{w}}" for x, w in zip(figures, (8, 7, 7, 7), strict=True))
            + f" {_fmt(log.available_kv_gib):>7} {_fmt(log.kv_cache_tokens):>10}"
        )
        if ours:
            logged = log.kv_cache_tokens or 1
            err = (ours["kv_cache_tokens"] - logged) / logged
            keys = ("weights_gib_per_gpu", "activation_gib", "non_torch_gib", "cudagraph_gib")
            print(
                f"{'':28} {'':6} {'ours':6} "
                + " ".join(f"{ours[k]:>{w}.2f}" for k, w in zip(keys, (8, 7, 7, 7), strict=True))
                + f" {ours['available_kv_cache_gib_per_gpu']:>7.2f} {ours['kv_cache_tokens']:>10}"
                + f" {100 * err:+.1f} %"
            )
        else:
            print(f"{'':28} {'':6} {'ours':6} (estimate cannot plan this config)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_truth", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("render", help="argv files and config dirs for the device")
    p.add_argument("--run", default=str(REPO / ".gpu" / "run"))
    p.add_argument("--models", default=str(REPO / ".gpu" / "models"))
    p.set_defaults(func=_render)
    p = sub.add_parser("rows", help="CSV rows from start-up logs (default: the committed ones)")
    p.add_argument("logs", nargs="*")
    p.add_argument("--update", action="store_true", help="replace the h200-*, h100-* rows")
    p.set_defaults(func=_rows)
    p = sub.add_parser("compare", help="glm-operator estimate against the committed logs")
    p.set_defaults(func=_compare)
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
