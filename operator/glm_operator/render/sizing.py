"""Pod defaults sized from the model: requests, the default cache volume, the startup budget.

Pure arithmetic on the plan's weight figures, documented because users see the numbers:

- **CPU request** ``1 + 1 x GPUs``: the API server and tokenizer, plus one worker process per GPU.
- **memory request** ``6 GiB + 10 % of the weights the pod loads``: vLLM reads safetensors
  through the page cache (which is not the pod's request) and copies shard by shard to the GPUs;
  the pod must not be BestEffort (first to be evicted) while it does so. Users who know better set
  ``serving.resources``.
- Both must fit the smallest common machine with that many GPUs, or a node autoscaler never finds
  one: 1-GPU shapes have 4 vCPU and 16 GiB (AWS g6.xlarge/g5.xlarge, GCP g2-standard-4), of which
  the kubelet keeps some (a 1-GPU pod of a 17.5 GiB model asks for 2 CPUs and 8 GiB).
- **checkpoint on disk** = weights per GPU x GPUs of the replica (the whole checkpoint is downloaded
  by every pod of an hf:// source); the default cache emptyDir and its ephemeral-storage request
  are that plus 10 %.
- **startup budget** ``600 s + 10 s per GiB`` of checkpoint (a Hub download at about 100 MiB/s,
  then loading and CUDA graph capture), at least 20 minutes, at most a day.
"""

from __future__ import annotations

import math

MIN_STARTUP_SECONDS = 20 * 60
MAX_STARTUP_SECONDS = 24 * 3600


def gib(value: float) -> str:
    """A whole-GiB Kubernetes quantity, rounded up (``"17Gi"``)."""
    return f"{max(1, math.ceil(value))}Gi"


def checkpoint_gib(weights_gib_per_gpu: float, gpus_per_replica: int) -> float:
    return weights_gib_per_gpu * gpus_per_replica


def default_requests(
    weights_gib_per_gpu: float, gpus_per_pod: int, cache_gib: float | None
) -> dict[str, str]:
    """CPU/memory requests for one pod, and ephemeral storage when it downloads into an emptyDir."""
    requests = {
        "cpu": str(1 + gpus_per_pod),
        "memory": gib(6 + 0.10 * weights_gib_per_gpu * gpus_per_pod),
    }
    if cache_gib is not None:
        requests["ephemeral-storage"] = gib(cache_gib * 1.1)
    return requests


def default_startup_timeout_seconds(checkpoint_size_gib: float) -> int:
    seconds = 600 + 10 * math.ceil(checkpoint_size_gib)
    return max(MIN_STARTUP_SECONDS, min(MAX_STARTUP_SECONDS, seconds))
