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

``Worker.load_model`` is traced the same way (what "Model loading took" counts): the blocks it allocated
that are still live when it returns, grouped the same way, beside the bytes of the model's parameters and
buffers (each storage once), so that weights the estimate misses show up by name.

Nothing here may stop a start-up: any failure is printed and the profiling run goes on untraced. Only
the device runs this; CI never imports it.
"""

from __future__ import annotations

import collections
import functools
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
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


class PatchAfterImport(importlib.abc.MetaPathFinder):
    """Finds ``target`` like the path finder does and calls ``patch`` on the module once it has run (any
    failure of ``patch`` is printed with ``log``). Also used by ``gpu_truth_router``."""

    def __init__(self, target: str, patch: Callable[[Any], None], log: Callable[[str], None]) -> None:
        self.target, self.patch, self.log = target, patch, log

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != self.target:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        exec_module = spec.loader.exec_module

        def exec_and_patch(module: Any) -> None:
            exec_module(module)
            try:
                self.patch(module)
            except Exception as exc:
                self.log(f"not patched: {exc!r}")

        spec.loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


def patch_after_import(target: str, patch: Callable[[Any], None], log: Callable[[str], None]) -> None:
    """``patch`` the module ``target`` now if it is imported, else as soon as it is (once per process)."""
    try:
        if target in sys.modules:
            patch(sys.modules[target])
        elif not any(isinstance(f, PatchAfterImport) and f.patch is patch for f in sys.meta_path):
            sys.meta_path.insert(0, PatchAfterImport(target, patch, log))
    except Exception as exc:
        log(f"not installed: {exc!r}")


def register() -> None:
    """The entry point vLLM calls (possibly several times, in several processes)."""
    patch_after_import(TARGET, _patch, _log)


def _patch(module: Any) -> None:
    worker = getattr(module, "Worker", None)
    if worker is None or getattr(worker, "_gpu_truth_memtrace", False):
        return
    original = worker.determine_available_memory
    original_load = getattr(worker, "load_model", None)

    def load_model(self: Any, *args: Any, **kwargs: Any) -> Any:
        assert original_load is not None
        return _traced_load(functools.partial(original_load, self, *args, **kwargs), self)

    @functools.wraps(original)
    def determine_available_memory(self: Any) -> Any:
        runner = self.model_runner
        runner.profile_run = functools.partial(_traced, runner.profile_run)
        try:
            return original(self)
        finally:
            runner.__dict__.pop("profile_run", None)

    worker.determine_available_memory = determine_available_memory
    if original_load is not None:
        worker.load_model = functools.wraps(original_load)(load_model)
    worker._gpu_truth_memtrace = True
    _log("installed")


def _traced(profile_run: Any) -> Any:
    return _trace(profile_run, report, "profile_run")


def _traced_load(load: Any, worker: Any) -> Any:
    def lines(snapshot: dict[str, Any], device: int) -> list[str]:
        return load_report(snapshot, device, getattr(worker.model_runner, "model", None))

    return _trace(load, lines, "load_model")


def _trace(run: Any, lines: Any, what: str) -> Any:
    """``run()`` under ``_record_memory_history``, then ``lines(snapshot, device)`` printed."""
    try:
        import torch  # type: ignore[import-not-found]

        memory = torch.cuda.memory
        memory._record_memory_history(enabled="all", context="all", stacks="python", max_entries=MAX_ENTRIES)
    except Exception as exc:
        _log(f"{what} not recorded: {exc!r}")
        return run()
    try:
        return run()
    finally:
        try:
            torch.cuda.synchronize()
            snapshot = memory._snapshot()
            memory._record_memory_history(enabled=None)
            for line in lines(snapshot, torch.cuda.current_device()):
                _log(line)
        except Exception as exc:
            _log(f"no {what} report: {exc!r}")


def _tensor_bytes(tensors: Any) -> tuple[int, int]:
    """(bytes, count) of the distinct CUDA storages among ``tensors``."""
    seen: set[int] = set()
    total = 0
    for t in tensors:
        if not getattr(t, "is_cuda", False):
            continue
        storage = t.untyped_storage()
        if storage.data_ptr() in seen:
            continue
        seen.add(storage.data_ptr())
        total += storage.nbytes()
    return total, len(seen)


def load_report(snapshot: dict[str, Any], device: int, model: Any) -> list[str]:
    """Lines describing what ``load_model`` left allocated (see the module docstring)."""
    traces = snapshot.get("device_traces") or []
    events = list(traces[device]) if device < len(traces) else []
    live = live_at(events, len(events) - 1)
    held = sum(int(e.get("size", 0)) for e in live.values())
    lines = [f"load_model left {len(live)} blocks allocated ({held / MIB:.1f} MiB)"]
    if model is not None:
        params, n_params = _tensor_bytes(model.parameters())
        buffers, n_buffers = _tensor_bytes(model.buffers())
        lines.append(
            f"  model parameters {params / MIB:.1f} MiB ({n_params} storages), "
            f"buffers {buffers / MIB:.1f} MiB ({n_buffers} storages)"
        )
        named = sorted(
            ((name, b.untyped_storage().nbytes()) for name, b in model.named_buffers() if b.is_cuda),
            key=lambda kv: -kv[1],
        )
        for name, size in named[:BLOCKS]:
            lines.append(f"  buffer {size / MIB:10.2f} MiB {name}")
    lines += grouped(live)
    return lines


def live_at(events: list[dict[str, Any]], at: int) -> dict[Any, dict[str, Any]]:
    """The blocks allocated in the trace and not freed after event ``at`` (by address)."""
    live: dict[Any, dict[str, Any]] = {}
    for event in events[: at + 1]:
        if event.get("action") == "alloc":
            live[event.get("addr")] = event
        elif event.get("action") == "free_completed":
            live.pop(event.get("addr"), None)
    return live


def grouped(live: dict[Any, dict[str, Any]]) -> list[str]:
    """The live blocks by allocation site, largest first, then the largest blocks one by one."""
    groups: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for event in live.values():
        group = groups[_site(event.get("frames") or [])]
        group[0] += int(event.get("size", 0))
        group[1] += 1
    lines = [
        f"  {size / MIB:10.1f} MiB {count:5d} x {site}"
        for site, (size, count) in sorted(groups.items(), key=lambda kv: -kv[1][0])[:TOP]
    ]
    # the largest blocks one by one, with their innermost frames whatever the file (torch's own included)
    for event in sorted(live.values(), key=lambda e: -int(e.get("size", 0)))[:BLOCKS]:
        frames = event.get("frames") or []
        where = " < ".join(_short(f) for f in frames[:BLOCK_FRAMES])
        lines.append(f"  block {int(event.get('size', 0)) / MIB:10.1f} MiB at {where}")
    return lines


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
    live = live_at(events, at)
    held = sum(int(e.get("size", 0)) for e in live.values()) / MIB
    return [
        f"profile_run peak +{peak / MIB:.1f} MiB net at event {at + 1} of {len(events)}; "
        f"{len(live)} blocks allocated in the run live then ({held:.1f} MiB)",
        *grouped(live),
    ]
