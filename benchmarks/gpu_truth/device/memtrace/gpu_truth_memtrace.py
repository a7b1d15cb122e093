"""vLLM general plugin for the gpu_truth device runs: which allocations make the profiling run's peak.

``run_cases.sh`` puts this directory on PYTHONPATH (``MEMTRACE=1``, the default), and vLLM runs every
``vllm.general_plugins`` entry point in each of its processes (``load_general_plugins`` in
``vllm/plugins/__init__.py``). ``register`` patches ``Worker.determine_available_memory`` as soon as
``vllm.v1.worker.gpu_worker`` is imported: the model runner's ``profile_run`` (V1 and V2 runner alike) then
runs under ``torch.cuda.memory._record_memory_history``. When it returns, the trace is replayed to the
moment the bytes it allocated (less what it freed of older blocks) peak, which is the "peak activation"
vLLM reports, and the blocks live at that moment are printed, grouped by the first two vLLM (or generated
torch.compile) frames of their allocation, largest first, then the five largest blocks with their innermost
frames. Each line starts with ``gpu_truth memtrace:``.

Nothing here may stop a start-up: any failure is printed and the profiling run goes on untraced. Only
the device runs this; CI never imports it.
"""

from __future__ import annotations

import collections
import functools
import importlib.abc
import importlib.machinery
import sys
from typing import Any

TARGET = "vllm.v1.worker.gpu_worker"
PREFIX = "gpu_truth memtrace:"
MAX_ENTRIES = 500_000
TOP = 15
BLOCKS = 5  # the largest single blocks live at the peak
BLOCK_FRAMES = 4
MIB = 2**20


def _log(message: str) -> None:
    print(f"{PREFIX} {message}", file=sys.stderr, flush=True)


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    """Finds ``TARGET`` like the path finder does and patches the module once it has run."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        exec_module = spec.loader.exec_module

        def exec_and_patch(module: Any) -> None:
            exec_module(module)
            try:
                _patch(module)
            except Exception as exc:
                _log(f"not patched: {exc!r}")

        spec.loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


def register() -> None:
    """The entry point vLLM calls (possibly several times, in several processes)."""
    try:
        if TARGET in sys.modules:
            _patch(sys.modules[TARGET])
        elif not any(isinstance(f, _PatchAfterImport) for f in sys.meta_path):
            sys.meta_path.insert(0, _PatchAfterImport())
    except Exception as exc:
        _log(f"not installed: {exc!r}")


def _patch(module: Any) -> None:
    worker = getattr(module, "Worker", None)
    if worker is None or getattr(worker, "_gpu_truth_memtrace", False):
        return
    original = worker.determine_available_memory

    @functools.wraps(original)
    def determine_available_memory(self: Any) -> Any:
        runner = self.model_runner
        runner.profile_run = functools.partial(_traced, runner.profile_run)
        try:
            return original(self)
        finally:
            runner.__dict__.pop("profile_run", None)

    worker.determine_available_memory = determine_available_memory
    worker._gpu_truth_memtrace = True
    _log("installed")


def _traced(profile_run: Any) -> Any:
    try:
        import torch  # type: ignore[import-not-found]

        memory = torch.cuda.memory
        memory._record_memory_history(enabled="all", context="all", stacks="python", max_entries=MAX_ENTRIES)
    except Exception as exc:
        _log(f"not recorded: {exc!r}")
        return profile_run()
    try:
        return profile_run()
    finally:
        try:
            torch.cuda.synchronize()
            snapshot = memory._snapshot()
            memory._record_memory_history(enabled=None)
            for line in report(snapshot, torch.cuda.current_device()):
                _log(line)
        except Exception as exc:
            _log(f"no report: {exc!r}")


# frames that name where a block was asked for: vLLM, generated torch.compile code, the kernel libraries
SITE_MARKERS = ("/vllm/", "torchinductor", "/flashinfer/", "/deep_gemm/")


def _short(
    frame: dict[str, Any], markers: tuple[str, ...] = ("/vllm/", "/torch/", "/flashinfer/", "/triton/")
) -> str:
    """``path:line function`` with the path cut at the first marker (the file name alone otherwise)."""
    name = str(frame.get("filename", "?"))
    at = next((name.find(m) for m in markers if m.startswith("/") and m in name), -1)
    path = name[at + 1 :] if at >= 0 else name[name.rfind("/") + 1 :]
    return f"{path}:{frame.get('line')} {frame.get('name')}"


def _frame_label(frame: dict[str, Any]) -> str | None:
    name = str(frame.get("filename", ""))
    return _short(frame, SITE_MARKERS) if any(m in name for m in SITE_MARKERS) else None


def _site(frames: list[dict[str, Any]]) -> str:
    labels = [label for label in (_frame_label(f) for f in frames) if label]
    if not labels:
        first = frames[0] if frames else {}
        return f"{first.get('filename', '?')}:{first.get('line', '?')} {first.get('name', '?')}"
    return " < ".join(labels[:2])


def peak_of(events: list[dict[str, Any]]) -> tuple[int, int]:
    """(index of the event after which the net allocation peaks, the net bytes then): allocations in the
    trace count up, frees count down (also frees of blocks allocated before the trace began)."""
    current = peak = 0
    at = -1
    sizes: dict[Any, int] = {}
    for i, event in enumerate(events):
        action, addr, size = event.get("action"), event.get("addr"), int(event.get("size", 0))
        if action == "alloc":
            sizes[addr] = size
            current += size
            if current > peak:
                peak, at = current, i
        elif action == "free_completed":
            current -= sizes.pop(addr, size)
    return at, peak


def report(snapshot: dict[str, Any], device: int) -> list[str]:
    """Lines describing the blocks live at the traced peak (see the module docstring)."""
    traces = snapshot.get("device_traces") or []
    events = list(traces[device]) if device < len(traces) else []
    at, peak = peak_of(events)
    live: dict[Any, dict[str, Any]] = {}
    for event in events[: at + 1]:
        if event.get("action") == "alloc":
            live[event.get("addr")] = event
        elif event.get("action") == "free_completed":
            live.pop(event.get("addr"), None)
    groups: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for event in live.values():
        group = groups[_site(event.get("frames") or [])]
        group[0] += int(event.get("size", 0))
        group[1] += 1
    held = sum(g[0] for g in groups.values()) / MIB
    lines = [
        f"profile_run peak +{peak / MIB:.1f} MiB net at event {at + 1} of {len(events)}; "
        f"{len(live)} blocks allocated in the run live then ({held:.1f} MiB)"
    ]
    for site, (size, count) in sorted(groups.items(), key=lambda kv: -kv[1][0])[:TOP]:
        lines.append(f"  {size / MIB:10.1f} MiB {count:5d} x {site}")
    # the largest blocks one by one, with their innermost frames whatever the file (torch's own included)
    for event in sorted(live.values(), key=lambda e: -int(e.get("size", 0)))[:BLOCKS]:
        frames = event.get("frames") or []
        where = " < ".join(_short(f) for f in frames[:BLOCK_FRAMES])
        lines.append(f"  block {int(event.get('size', 0)) / MIB:10.1f} MiB at {where}")
    return lines
