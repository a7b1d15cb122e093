"""The H200 fit-truth harness (benchmarks/gpu_truth) without a GPU: argv rendering and log parsing.

The GPU runs themselves stay out of CI; their logs are committed (benchmarks/gpu_truth/logs/*.log.gz)
and must give the rows of tests/fixtures/vllm-startups.csv that carry their name.
"""

from __future__ import annotations

import csv
import json

import pytest
from benchmarks.gpu_truth.__main__ import CSV_PATH, ROW_PREFIXES, committed_rows
from benchmarks.gpu_truth.cases import BY_NAME, CASES, CONFIGS, HARNESS_FLAGS, LOGS, PARSER_FLAGS
from benchmarks.gpu_truth.logparse import parse, read_log

from glm_operator.render.objects import build_vllm_args

LOGGED = sorted(p.name.removesuffix(".log.gz") for p in LOGS.glob("*.log.gz"))


def test_every_config_is_valid_json_with_a_source() -> None:
    for directory in CONFIGS.iterdir():
        config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
        assert config["architectures"], directory.name
        source = (directory / "SOURCE").read_text(encoding="utf-8")
        # copied from a public file, or (Qwen2.5) transcribed from the model's page, publicly corroborated
        assert "verbatim" in source or ("transcribed" in source and "https://" in source), directory.name


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_device_argv_is_the_pods_with_the_model_swapped(case: object) -> None:
    """What runs on the device is build_vllm_args' output: the model id swapped for the config directory,
    the API server's parser flags (they need the tokenizer) dropped and the harness flags appended."""
    from benchmarks.gpu_truth.cases import Case

    assert isinstance(case, Case)
    pod = build_vllm_args(case.context())
    device = case.device_args("/m")
    assert pod[0] == case.model_id
    assert device[0] == f"/m/{case.config}"
    assert device[-len(HARNESS_FLAGS) :] == list(HARNESS_FLAGS)
    body = device[1 : -len(HARNESS_FLAGS)]
    assert not set(body) & set(PARSER_FLAGS)
    if case.speculative_tokens:  # the pod's --speculative-config, with the synthetic acceptance added
        pod_spec = json.loads(pod[pod.index("--speculative-config") + 1])
        device_spec = json.loads(body[body.index("--speculative-config") + 1])
        assert device_spec == {
            **pod_spec,
            "rejection_sample_method": "synthetic",
            "synthetic_acceptance_length": case.synthetic_acceptance_length,
        }
        body = [a for a in body if not a.startswith("{")]
    assert [a for a in body if a not in pod] == []  # nothing but the pod's own arguments
    assert pod[pod.index("--max-model-len") + 1] == str(case.context_length)
    assert pod[pod.index("--max-num-seqs") + 1] == str(case.max_num_seqs)
    if case.max_num_batched_tokens:
        assert pod[pod.index("--max-num-batched-tokens") + 1] == str(case.max_num_batched_tokens)
    if case.kv_cache_dtype != "auto":
        assert pod[pod.index("--kv-cache-dtype") + 1] == case.kv_cache_dtype
    assert ("--quantization" in pod) == (
        case.quantization == "fp8" and case.checkpoint_quantization() is None
    )


def test_glm_pods_get_the_catalog_parsers() -> None:
    pod = BY_NAME["flash-c32k"].pod_args()
    assert pod[pod.index("--tool-call-parser") + 1] == "glm47"
    assert pod[pod.index("--reasoning-parser") + 1] == "glm45"


@pytest.mark.parametrize("name", LOGGED)
def test_committed_logs_parse(name: str) -> None:
    log = parse(read_log(LOGS / f"{name}.log.gz"))
    case = BY_NAME[name]
    assert log.complete, log.error
    assert log.weights_gib and log.available_kv_gib and log.kv_cache_tokens
    # the V1 runner logs its CUDA-graph estimate; Model Runner V2 in 0.26 estimates none
    assert (log.graph_estimate_gib is None) == (log.model_runner == "V2")
    if log.max_num_batched_tokens is not None and case.max_num_batched_tokens:
        assert log.max_num_batched_tokens == case.max_num_batched_tokens
    if log.actual_weights_gib is not None:
        assert log.actual_weights_gib == log.weights_gib


def test_the_budget_identity_holds_in_the_logs() -> None:
    """vLLM 0.26 (gpu_worker.py determine_available_memory): available = total x util - weights - peak
    activation - non-torch - graph estimate; the logs round each to 0.01 GiB."""
    for name in LOGGED:
        log = parse(read_log(LOGS / f"{name}.log.gz"))
        if log.activation_gib is None or log.non_torch_gib is None:
            continue
        case = BY_NAME[name]
        requested = case.device.memory_gib * case.gpu_memory_utilization
        rest = (log.weights_gib or 0) + log.activation_gib + log.non_torch_gib + (log.graph_estimate_gib or 0)
        assert requested - rest == pytest.approx(log.available_kv_gib, abs=0.04), name


def test_the_graph_estimate_is_the_larger_first_capture_plus_the_per_graph_samples() -> None:
    """vLLM 0.26's V1 graph estimate (``profile_cudagraph_memory``, gpu_model_runner.py): per mode the first
    capture and one per-graph sample x (graphs - 1); the total overlays the modes' first captures (max) and
    adds the rest. Every DEBUG log's split gives its INFO total (the CSV keeps the split, graph_split_mib)."""
    split = 0
    for name in LOGGED:
        log = parse(read_log(LOGS / f"{name}.log.gz"))
        if not log.graph_split:
            continue
        split += 1
        assert {mode for mode, *_ in log.graph_split} <= {"PIECEWISE", "FULL"}, name
        total = max(first for _, first, _, _ in log.graph_split) + sum(
            (n - 1) * per for _, _, n, per in log.graph_split
        )
        assert log.graph_estimate_gib is not None
        assert total / 1024 == pytest.approx(log.graph_estimate_gib, abs=0.006), name
        assert log.graph_split_text.startswith("PIECEWISE "), name
    assert split >= 20


def test_a_v2_log_and_a_failed_start() -> None:
    text = (
        "(EngineCore pid=1) INFO [gpu_worker.py:378] Using V2 Model Runner\n"
        "INFO [scheduler.py:252] Chunked prefill is enabled with max_num_batched_tokens=16384.\n"
        "INFO [model_runner.py:305] Model loading took 8.83 GiB and 4.34 seconds\n"
        "INFO [gpu_worker.py:560] Available KV cache memory: 122.19 GiB\n"
        "INFO [kv_cache_utils.py:2177] GPU KV cache size: 889,776 tokens\n"
        "INFO [kv_cache_utils.py:2178] Maximum concurrency for 16,384 tokens per request: 54.31x\n"
        "INFO [gpu_worker.py:857] Free memory ... Actual usage is 8.83 GiB for weight, 1.56 GiB for peak "
        "activation, 0.22 GiB for non-torch memory, and 0.95 GiB for CUDAGraph memory. Replace ...\n"
    )
    log = parse(text)
    assert (log.model_runner, log.max_num_batched_tokens, log.kv_cache_tokens) == ("V2", 16384, 889776)
    assert (log.activation_gib, log.non_torch_gib, log.graph_actual_gib) == (1.56, 0.22, 0.95)
    assert log.graph_estimate_gib is None and log.max_concurrency == 54.31 and log.error is None
    failed = parse("(APIServer pid=1) AttributeError: 'NoneType' object has no attribute 'get_vocab'\n")
    assert not failed.complete and failed.error and "get_vocab" in failed.error


def test_a_log_cut_before_actual_usage_is_not_an_error() -> None:
    """vLLM's ulimit WARNING carries "error" but is none: an engine that logged its KV cache did start."""
    text = (
        "(APIServer pid=1) WARNING [system_utils.py:299] Found ulimit of 20000 and failed to automatically "
        "increase with error current limit exceeds maximum limit.\n"
        "INFO [gpu_worker.py:560] Available KV cache memory: 46.04 GiB\n"
        "INFO [kv_cache_utils.py:2177] GPU KV cache size: 3,850,176 tokens\n"
    )
    log = parse(text)
    assert log.complete and log.cut_before_actual_usage and log.error is None
    notes = {r["id"]: r["notes"] for r in committed_rows()}
    assert not any("engine did not start" in n for n in notes.values())
    assert 'before "Actual usage"' in notes["h200-glm5fp8-b16k"]
    assert "from the DEBUG line" in notes["h200-glm5fp8-b16k"]


def test_a_debug_log_gives_the_split_without_actual_usage() -> None:
    """VLLM_LOGGING_LEVEL=DEBUG prints the profiling result before the KV lines (glm5fp8-b16k, session 5)."""
    log = parse(read_log(LOGS / "glm5fp8-b16k.log.gz"))
    assert log.complete and log.split_from_debug
    assert (log.activation_gib, log.non_torch_gib, log.kv_cache_tokens) == (7.74, 0.23, 4_109_632)
    full = parse(read_log(LOGS / "qwen3moe-fp8-b16k.log.gz"))  # DEBUG too, but "Actual usage" wins
    assert not full.split_from_debug and full.activation_gib == 3.21


def test_committed_logs_are_the_csv_rows() -> None:
    with CSV_PATH.open(encoding="utf-8") as fh:
        in_csv = {r["id"]: r for r in csv.DictReader(fh) if r["id"].startswith(ROW_PREFIXES)}
    rows = {r["id"]: r for r in committed_rows()}
    assert rows.keys() == in_csv.keys()
    for key, row in rows.items():
        assert {k: in_csv[key].get(k, "") for k in row} == row, key


def test_perf_sweeps_stay_within_the_batch_and_parse_as_loadtest_arguments() -> None:
    """Issue 32's sweeps: levels up to max-num-seqs (plus twice a small batch, to see queueing), and
    each line render writes must be arguments the real `glm-operator loadtest` parser accepts."""
    import argparse

    from benchmarks.gpu_truth.cases import perf_sweeps

    from glm_operator.commands import loadtest

    chat, long = perf_sweeps(16)
    assert (chat.shape, chat.input_tokens, chat.output_tokens) == ("chat", 512, 128)
    assert chat.concurrencies == (1, 4, 16, 32)
    assert long.concurrencies == (1, 4, 16)
    chat, long = perf_sweeps(1024)
    assert chat.concurrencies == (1, 4, 16, 64, 256)
    assert long.concurrencies == (1, 4, 16, 64)
    parser = argparse.ArgumentParser()
    loadtest.register(parser.add_subparsers())
    args = parser.parse_args(["loadtest", "--url", "http://x", "--model", "m", *long.loadtest_args()])
    assert (args.input_tokens, args.output_tokens, args.concurrency) == (4096, 128, "1,4,16,64")


def test_render_writes_perf_files_only_for_cases_with_sweeps(tmp_path: object) -> None:
    from pathlib import Path

    from benchmarks.gpu_truth.__main__ import main

    assert isinstance(tmp_path, Path)
    stale = tmp_path / "run" / "perf" / "flash-c32k"
    stale.parent.mkdir(parents=True)
    stale.write_text("old\n")
    assert main(["render", "--run", str(tmp_path / "run"), "--models", str(tmp_path / "models")]) == 0
    perf = {p.name for p in (tmp_path / "run" / "perf").iterdir()}
    assert perf == {c.name for c in CASES if c.sweeps}
    lines = (tmp_path / "run" / "perf" / "flash-s16-perf").read_text().splitlines()
    assert [line.split()[0] for line in lines] == ["chat", "long"]
    assert "--concurrency 1,4,16,32" in lines[0]
    assert (tmp_path / "run" / "run_cases.sh").exists()
    # the V1-runner cases start with VLLM_USE_V2_MODEL_RUNNER=0, the others with no env file
    env = tmp_path / "run" / "env"
    assert (env / "qwen25-7b-v1-b2k.env").read_text() == "VLLM_USE_V2_MODEL_RUNNER=0\n"
    assert not (env / "qwen25-7b-b2k.env").exists()
    plugin = tmp_path / "run" / "memtrace"
    assert (plugin / "gpu_truth_memtrace.py").exists()
    entry = (plugin / "gpu_truth_memtrace-0.1.dist-info" / "entry_points.txt").read_text()
    assert "[vllm.general_plugins]" in entry and "gpu_truth_memtrace:register" in entry


def _memtrace() -> object:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[2] / "benchmarks/gpu_truth/device/memtrace/gpu_truth_memtrace.py"
    spec = importlib.util.spec_from_file_location("gpu_truth_memtrace", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _alloc(addr: int, mib: int, *files: str) -> dict[str, object]:
    frames = [{"filename": f, "line": i + 1, "name": f"f{i}"} for i, f in enumerate(files)]
    return {"action": "alloc", "addr": addr, "size": mib * 2**20, "frames": frames}


def _free(addr: int, mib: int) -> dict[str, object]:
    return {"action": "free_completed", "addr": addr, "size": mib * 2**20}


def test_memtrace_reports_the_blocks_live_at_the_net_peak() -> None:
    m = _memtrace()
    moe = "/tmp/site/vllm/model_executor/layers/fused_moe/modular_kernel.py"
    events = [
        _alloc(1, 300, "/usr/lib/torch/empty.py", moe, "/tmp/site/vllm/models/glm.py"),
        _alloc(2, 100, "/tmp/torchinductor_root/ab/cxyz.py"),
        _free(2, 100),
        _free(99, 250),  # a block from before the trace: the net count drops
        _alloc(3, 200, "/tmp/site/vllm/v1/sample/sampler.py"),  # net 250: below the first peak
        _alloc(4, 50, moe, "/tmp/site/vllm/models/glm.py"),  # net 300: still not above 400
    ]
    assert m.peak_of(events) == (1, 400 * 2**20)  # type: ignore[attr-defined]
    lines = m.report({"device_traces": [events]}, 0)  # type: ignore[attr-defined]
    assert lines[0].startswith("profile_run peak +400.0 MiB net at event 2 of 6; 2 blocks")
    assert "300.0 MiB" in lines[1]
    assert "fused_moe/modular_kernel.py:2 f1 < vllm/models/glm.py:3 f2" in lines[1]
    assert "100.0 MiB" in lines[2] and "cxyz.py:1 f0" in lines[2]
    blocks = [line for line in lines if line.strip().startswith("block")]
    assert len(blocks) == 2 and "300.0 MiB at torch/empty.py:1 f0 < vllm/model_executor" in blocks[0]


def test_memtrace_wraps_profile_run_once_and_restores_it() -> None:
    import types

    m = _memtrace()
    calls: list[str] = []

    class Runner:
        def profile_run(self) -> int:
            calls.append("profile")
            return 7

    class Worker:
        def __init__(self) -> None:
            self.model_runner = Runner()

        def determine_available_memory(self) -> int:
            return self.model_runner.profile_run()

    module = types.SimpleNamespace(Worker=Worker)
    m._patch(module)  # type: ignore[attr-defined]
    m._patch(module)  # type: ignore[attr-defined]  # vLLM loads plugins in several places: patch once
    worker = Worker()
    assert worker.determine_available_memory() == 7  # no GPU here: traced run falls back, result kept
    assert calls == ["profile"]
    assert "profile_run" not in worker.model_runner.__dict__


def test_memtrace_load_report_lists_what_load_model_left_allocated() -> None:
    m = _memtrace()
    rope = "/tmp/site/vllm/model_executor/layers/rotary_embedding/base.py"
    linear = "/tmp/site/vllm/model_executor/layers/linear.py"
    events = [
        _alloc(1, 400, "/usr/lib/torch/empty.py", linear),
        _alloc(2, 64, "/usr/lib/torch/empty.py", "/tmp/site/vllm/model_executor/model_loader/dummy.py"),
        _free(2, 64),  # a temporary of the loader: not left allocated
        _alloc(3, 8, rope),
        _alloc(4, 8, rope),
    ]
    lines = m.load_report({"device_traces": [events]}, 0, None)  # type: ignore[attr-defined]
    assert lines[0] == "load_model left 3 blocks allocated (416.0 MiB)"
    assert "400.0 MiB     1 x vllm/model_executor/layers/linear.py:2 f1" in lines[1]
    assert "16.0 MiB     2 x vllm/model_executor/layers/rotary_embedding/base.py:1 f0" in lines[2]
    assert not any("dummy.py" in line for line in lines)
