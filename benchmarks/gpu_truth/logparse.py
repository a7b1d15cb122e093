"""Read a vLLM 0.26 start-up log into the figures of a ``tests/fixtures/vllm-startups.csv`` row.

The lines and where vLLM 0.26.0 prints them (paths under ``vllm/`` in the release wheel):

* ``Using V2 Model Runner`` (``v1/worker/gpu_worker.py``, ``init_device``): Model Runner V2; absent: V1.
* ``Chunked prefill is enabled with max_num_batched_tokens=N.`` (``config/scheduler.py``).
* ``Model loading took X GiB memory`` (V1, ``v1/worker/gpu_model_runner.py``) / ``Model loading took X GiB
  and`` (V2, ``v1/worker/gpu/model_runner.py``).
* ``Estimated CUDA graph memory: X GiB total`` (V1 ``GPUModelRunner.profile_cudagraph_memory``; the V2
  runner's returns 0 in 0.26 and logs nothing).
* ``Available KV cache memory: X GiB`` (``v1/worker/gpu_worker.py``, ``determine_available_memory``).
* ``GPU KV cache size: N tokens`` and ``Maximum concurrency for L tokens per request: Cx``
  (``v1/core/kv_cache_utils.py``, ``get_kv_cache_configs``).
* ``Actual usage is W GiB for weight, A GiB for peak activation, N GiB for non-torch memory, and G GiB for
  CUDAGraph memory.`` (``v1/worker/gpu_worker.py``, ``compile_or_warm_up_model``): A and N are the
  profiling run's ``torch_peak_increase`` and ``non_torch_increase`` that the budget subtracted, G the
  graphs actually captured (after the KV cache, not the estimate the budget subtracted).
* with ``VLLM_LOGGING_LEVEL=DEBUG``, before the KV lines: ``Memory profiling takes S seconds. Total non KV
  cache memory: X GiB; torch peak memory increase: A GiB; non-torch forward increase memory: N GiB; weights
  memory: W GiB.`` (``utils/mem_utils.py``, ``MemoryProfilingResult.__repr__``, logged by
  ``determine_available_memory``): the same A and N, read when the log ends before "Actual usage".
"""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass
from pathlib import Path

_NUM = r"([0-9][0-9.]*)"


@dataclass(frozen=True)
class StartupLog:
    """What one start-up log says (None where the line is missing)."""

    model_runner: str  # "V1" or "V2"
    max_num_batched_tokens: int | None
    weights_gib: float | None
    graph_estimate_gib: float | None  # the estimate the budget subtracted (V1 runner's log line)
    available_kv_gib: float | None
    kv_cache_tokens: int | None
    max_concurrency: float | None
    actual_weights_gib: float | None
    activation_gib: float | None
    non_torch_gib: float | None
    graph_actual_gib: float | None
    error: str | None  # the last error line when the engine did not start (no KV-cache lines)
    split_from_debug: bool = False  # activation and non-torch read from the DEBUG profiling line
    # the V1 graph estimate's DEBUG split per mode: (first capture MiB, graphs, per-graph MiB); vLLM's total
    # is the larger first capture plus (graphs - 1) x per-graph of each mode (0.26 profile_cudagraph_memory)
    graph_split: tuple[tuple[str, float, int, float], ...] = ()

    @property
    def graph_split_text(self) -> str:
        """The split as the CSV's graph_split_mib column keeps it: ``PIECEWISE 136+(51-1)x4; FULL ...``."""
        return "; ".join(f"{mode} {first:g}+({n}-1)x{per:g}" for mode, first, n, per in self.graph_split)

    @property
    def complete(self) -> bool:
        return self.available_kv_gib is not None and self.kv_cache_tokens is not None

    @property
    def cut_before_actual_usage(self) -> bool:
        """The engine sized its KV cache but the log ends before "Actual usage is ..." (no split)."""
        return self.complete and self.activation_gib is None


def _last(pattern: str, text: str) -> re.Match[str] | None:
    found = list(re.finditer(pattern, text))
    return found[-1] if found else None


def _float(pattern: str, text: str) -> float | None:
    m = _last(pattern, text)
    return float(m.group(1)) if m else None


# the V1 runner's DEBUG line per mode (vLLM 0.26 gpu_model_runner.py profile_cudagraph_memory)
_GRAPH_SPLIT = (
    rf"Estimated (\w+) CUDA graph memory: {_NUM} MiB first-capture \+ \((\d+)-1\) × {_NUM} MiB per-graph"
)


def parse(text: str) -> StartupLog:
    """The figures of one vLLM 0.26 start-up log."""
    mnbt = _last(r"max_num_batched_tokens=(\d+)", text)
    tokens = _last(r"GPU KV cache size: ([0-9,]+) tokens", text)
    usage = _last(
        rf"Actual usage is {_NUM} GiB for weight, {_NUM} GiB for peak activation, {_NUM} GiB for "
        rf"non-torch memory, and {_NUM} GiB for CUDAGraph memory",
        text,
    )
    debug = _last(
        rf"torch peak memory increase: {_NUM}GiB; non-torch forward increase memory: {_NUM}GiB", text
    )
    error = None
    available = _float(rf"Available KV cache memory: {_NUM} GiB", text)
    if usage is None and (available is None or tokens is None):
        # an engine that sized its KV cache did start (a log cut before "Actual usage" is no error);
        # vLLM's own WARNING lines (the API server's "Found ulimit of ... failed ... with error ...") are
        # not errors
        errors = re.findall(r"^(?!.*\bWARNING\b).*(?:Error|error:).*$", text, flags=re.MULTILINE)
        error = errors[-1].strip()[:300] if errors else "no memory lines"
    return StartupLog(
        model_runner="V2" if "Using V2 Model Runner" in text else "V1",
        max_num_batched_tokens=int(mnbt.group(1)) if mnbt else None,
        weights_gib=_float(rf"Model loading took {_NUM} GiB", text),
        graph_estimate_gib=_float(rf"Estimated CUDA graph memory: {_NUM} GiB total", text),
        available_kv_gib=available,
        kv_cache_tokens=int(tokens.group(1).replace(",", "")) if tokens else None,
        max_concurrency=_float(rf"Maximum concurrency for [0-9,]+ tokens per request: {_NUM}x", text),
        actual_weights_gib=float(usage.group(1)) if usage else None,
        activation_gib=float(usage.group(2)) if usage else float(debug.group(1)) if debug else None,
        non_torch_gib=float(usage.group(3)) if usage else float(debug.group(2)) if debug else None,
        graph_actual_gib=float(usage.group(4)) if usage else None,
        error=error,
        split_from_debug=usage is None and debug is not None,
        graph_split=tuple(
            (m.group(1), float(m.group(2)), int(m.group(3)), float(m.group(4)))
            for m in re.finditer(_GRAPH_SPLIT, text)
        ),
    )


def memtrace_sites(text: str) -> dict[str, float]:
    """MiB per allocation site live at the profiling run's peak, from the ``gpu_truth memtrace`` lines of
    ``device/memtrace`` (the innermost vLLM frame, e.g. ``vllm/v1/worker/workspace.py:176``); empty when the
    log has none. Only the profiling run's lines count, not the load trace printed before them."""
    start = text.rfind("gpu_truth memtrace: profile_run peak")
    if start < 0:
        return {}
    sites: dict[str, float] = {}
    for m in re.finditer(r"gpu_truth memtrace:\s+([0-9.]+) MiB\s+\d+ x (\S+)", text[start:]):
        sites[m.group(2)] = sites.get(m.group(2), 0.0) + float(m.group(1))
    return sites


def read_log(path: Path) -> str:
    """A log as committed (``.log.gz``) or as written (``.log``)."""
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    return data.decode("utf-8", errors="replace")
