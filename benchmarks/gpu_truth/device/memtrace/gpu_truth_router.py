"""vLLM general plugin for the gpu_truth device runs: a trained router's spread of tokens, with dummy weights.

``--load-format dummy`` draws every parameter uniformly in +-1e-3 (``initialize_dummy_weights``), so a GLM
MoE router's scores differ by less than its ``e_score_correction_bias`` and every token picks the same
top-k experts: a load test then reads k experts per MoE layer whatever the batch, where real traffic reads
what uniform routing predicts (``planning/speed/performance.py``, ``experts_touched``; ``same_experts``).

With ``GPU_TRUTH_SPREAD_ROUTER=1`` (a case's ``spread_router``), once ``Worker.load_model`` returns this
plugin draws every router weight (parameters named ``*.gate.weight``: one row per routed expert, in the
target and in the MTP drafter) from N(0, 1) and zeroes every ``e_score_correction_bias``, so each token's
scores follow its own hidden state. It prints ``gpu_truth router:`` lines: how many routers it re-drew and,
for the first, how many distinct experts the top-k of 256 random hidden states picks. The load test's ITL
at large batches is the check that the spread reaches the kernels (README). Any failure only prints a
line. Without the variable it does nothing. Only the device runs this; CI never imports it.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

from gpu_truth_memtrace import patch_after_import

TARGET = "vllm.v1.worker.gpu_worker"
PREFIX = "gpu_truth router:"
SAMPLE_TOKENS = 256


def _log(message: str) -> None:
    print(f"{PREFIX} {message}", file=sys.stderr, flush=True)


def register() -> None:
    """The entry point vLLM calls in each of its processes."""
    if os.environ.get("GPU_TRUTH_SPREAD_ROUTER") == "1":
        patch_after_import(TARGET, _patch, _log)


def _patch(module: Any) -> None:
    worker = getattr(module, "Worker", None)
    if worker is None or getattr(worker, "_gpu_truth_router", False):
        return
    original = worker.load_model

    @functools.wraps(original)
    def load_model(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        try:
            runner = self.model_runner
            models = [runner.get_model()]
            drafter = getattr(runner, "drafter", None)
            if drafter is not None and getattr(drafter, "model", None) is not None:
                models.append(drafter.model)
            _spread(models)
        except Exception as exc:
            _log(f"routers left as loaded: {exc!r}")
        return result

    worker.load_model = load_model
    worker._gpu_truth_router = True


def _spread(models: list[Any]) -> None:
    import torch

    named = [(name, param) for model in models for name, param in model.named_parameters()]
    gates = [(name, param) for name, param in named if name.endswith(".gate.weight") and param.dim() == 2]
    if not gates:
        _log("no router (*.gate.weight) found: nothing drawn")
        return
    name, gate = gates[0]
    with torch.no_grad():
        for _, param in gates:
            param.normal_(0.0, 1.0)
        biases = [param.zero_() for n, param in named if n.endswith("e_score_correction_bias")]
        _log(f"{len(gates)} routers drawn from N(0, 1), {len(biases)} correction biases zeroed")
        experts, hidden = gate.shape
        k = min(8, experts)
        x = torch.randn(SAMPLE_TOKENS, hidden, device=gate.device, dtype=torch.float32)
        picked = torch.sigmoid(x @ gate.detach().float().T).topk(k).indices
    distinct = len(set(picked.flatten().tolist()))
    _log(f"{name}: top-{k} of {SAMPLE_TOKENS} random hidden states pick {distinct} of {experts} experts")
