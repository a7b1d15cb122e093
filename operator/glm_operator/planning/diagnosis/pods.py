"""Diagnose why vLLM pods do not become ready, from pod objects alone (pure).

``diagnose_pods`` checks the pods layer by layer (scheduling, image, config, host RAM, GPU memory, KV
cache, runtime) and gives one ``Diagnosis`` per reason, with the pods concerned, what happened and a
``fix`` in terms of the GLMDeployment spec, so ``Degraded`` names the cause and the change that helps.
vLLM's own errors come from the termination message the kubelet copies from the log. The result is
deterministic for a given set of pods. docs/planning.md ("Why pods do not serve") has the table.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from glm_operator.api.v1alpha1 import LABEL_GPU_PRODUCT

LABEL_LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LABEL_LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"

MAX_MESSAGE_LENGTH = 1024
MAX_EXCERPT_LENGTH = 300


class Reason(StrEnum):
    """Diagnosis reasons (CamelCase, usable as condition reasons), in diagnosis order."""

    INSUFFICIENT_GPU = "InsufficientGPU"
    GPU_NODES_UNAVAILABLE = "GPUNodesUnavailable"
    UNSCHEDULABLE = "Unschedulable"
    IMAGE_PULL_FAILED = "ImagePullFailed"
    CONTAINER_CONFIG_ERROR = "ContainerConfigError"
    OOM_KILLED = "OOMKilled"
    GPU_MEMORY_IN_USE = "GPUMemoryInUse"
    GPU_OUT_OF_MEMORY = "GPUOutOfMemory"
    KV_CACHE_TOO_SMALL = "KVCacheTooSmall"
    CONTEXT_TOO_LONG = "ContextTooLong"
    CRASH_LOOP = "CrashLoop"


REASON_ORDER: tuple[Reason, ...] = tuple(Reason)
# Reasons that capacity can resolve without a spec change (more nodes, GPUs freed elsewhere).
CAPACITY_REASONS: frozenset[str] = frozenset({Reason.INSUFFICIENT_GPU, Reason.GPU_NODES_UNAVAILABLE})

_IMAGE_PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
_CONFIG_REASONS = frozenset({"CreateContainerConfigError", "CreateContainerError"})

# "0/9 nodes are available: 7 node(s) didn't match Pod's node affinity/selector, 2 node(s) had
# untolerated taint(s)": the nodes of the planned GPU type exist but are tainted (NotReady,
# unreachable, cordoned for maintenance). That passes without a spec change.
_TAINT_ONLY = re.compile(r"untolerated taint")
_OTHER_BLOCKERS = re.compile(
    r"Insufficient|persistentvolumeclaim|volume node affinity|didn't have free ports|Too many pods|"
    r"didn't match pod (?:anti-)?affinity rules|didn't satisfy existing pods",
    re.IGNORECASE,
)
_INSUFFICIENT_GPU = re.compile(r"Insufficient ((?:nvidia|amd)\.com/[\w.-]+|[\w.-]*gpu[\w.-]*)")
_V0_CONTEXT_TOO_LONG = re.compile(
    r"max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored"
    r" in KV cache \((\d+)\)"
)
_V1_CONTEXT_TOO_LONG = re.compile(
    r"max seq len \((\d+)\), \(([\d.]+) GiB KV cache is needed, which is larger than the available"
    r" KV cache memory \((-?[\d.]+) GiB\)"
)
_V1_ESTIMATED_LENGTH = re.compile(r"estimated maximum model length is (\d+)")
_NO_CACHE_BLOCKS = re.compile(r"No available memory for the cache blocks|Available KV cache memory: -")
_FREE_MEMORY = re.compile(
    r"Free memory on device[^(]*\(([\d.]+)/([\d.]+) GiB\) on startup is less than desired GPU memory"
    r" utilization \(([\d.]+)"
)
_CUDA_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory")
_LOADING = re.compile(r"load_model|Loading weights|model_loader|Loading model|Starting to load model")
_ERROR_LINE = re.compile(r"\b\w*(?:Error|Exception)\b:")


@dataclass(frozen=True)
class Diagnosis:
    """One reason why pods are not serving, with the pods concerned and what to change."""

    reason: str
    message: str
    fix: str
    pods: tuple[str, ...]


@dataclass(frozen=True)
class VLLMError:
    """What a vLLM log excerpt says went wrong."""

    reason: Reason
    max_model_len: int | None = None  # the context vLLM was asked for
    fitting_tokens: int | None = None  # what the KV cache can hold (ContextTooLong)
    free_fraction: float | None = None  # free / total GPU memory at start (GPUMemoryInUse)
    while_loading: bool = False  # CUDA OOM while loading the weights


@dataclass(frozen=True)
class _Finding:
    reason: Reason
    pod: str
    replica: str
    gpu_product: str
    detail: str
    fix: str
    fitting_tokens: int | None = None


def classify_vllm_error(text: str) -> VLLMError | None:
    """Recognise vLLM's fatal start-up errors in a log excerpt; None when none is found."""
    if match := _V0_CONTEXT_TOO_LONG.search(text):
        return VLLMError(
            Reason.CONTEXT_TOO_LONG, max_model_len=int(match.group(1)), fitting_tokens=int(match.group(2))
        )
    if match := _V1_CONTEXT_TOO_LONG.search(text):
        estimate = _V1_ESTIMATED_LENGTH.search(text)
        if estimate is not None and int(estimate.group(1)) > 0:
            return VLLMError(
                Reason.CONTEXT_TOO_LONG,
                max_model_len=int(match.group(1)),
                fitting_tokens=int(estimate.group(1)),
            )
        return VLLMError(Reason.KV_CACHE_TOO_SMALL, max_model_len=int(match.group(1)))
    if _NO_CACHE_BLOCKS.search(text):
        return VLLMError(Reason.KV_CACHE_TOO_SMALL)
    if match := _FREE_MEMORY.search(text):
        free, total = float(match.group(1)), float(match.group(2))
        return VLLMError(Reason.GPU_MEMORY_IN_USE, free_fraction=free / total if total else None)
    if _CUDA_OOM.search(text):
        return VLLMError(Reason.GPU_OUT_OF_MEMORY, while_loading=bool(_LOADING.search(text)))
    return None


def log_excerpt(text: str, limit: int = MAX_EXCERPT_LENGTH) -> str:
    """The most telling line of a log tail: the last exception line, else the last line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    errors = [line for line in lines if _ERROR_LINE.search(line) and "See root cause above" not in line]
    line = errors[-1] if errors else lines[-1]
    return line if len(line) <= limit else line[: limit - 1] + "…"


# --- reading pod dicts -------------------------------------------------------------------------


def _get(obj: Mapping[str, Any] | None, *path: str) -> Any:
    current: Any = obj
    for key in path:
        if not isinstance(current, Mapping):
            return None
        current = current.get(key)
    return current


def _pod_name(pod: Mapping[str, Any]) -> str:
    return str(_get(pod, "metadata", "name") or "<unnamed>")


def _replica_key(pod: Mapping[str, Any]) -> str:
    """Pods of one LeaderWorkerSet group are one replica; a Deployment pod is a replica."""
    labels = _get(pod, "metadata", "labels") or {}
    if LABEL_LWS_NAME in labels and LABEL_LWS_GROUP_INDEX in labels:
        return f"{labels[LABEL_LWS_NAME]}/{labels[LABEL_LWS_GROUP_INDEX]}"
    return _pod_name(pod)


def _container_spec(pod: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    for container in _get(pod, "spec", "containers") or []:
        if container.get("name") == name:
            return dict(container)
    return {}


def _arg(container: Mapping[str, Any], flag: str) -> str | None:
    """Value of ``--flag value`` or ``--flag=value`` in a container's command and args."""
    words = [str(word) for word in (container.get("command") or []) + (container.get("args") or [])]
    for index, word in enumerate(words):
        if word == flag and index + 1 < len(words):
            return words[index + 1]
        if word.startswith(flag + "="):
            return word.split("=", 1)[1]
    return None


def _round_down_context(tokens: int) -> int:
    """A round context length not above ``tokens`` (multiple of 1024 when possible)."""
    return tokens if tokens < 1024 else tokens // 1024 * 1024


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


# --- per-pod rules -----------------------------------------------------------------------------


def _scheduling_finding(pod: Mapping[str, Any], gpu_product: str) -> _Finding | None:
    for condition in _get(pod, "status", "conditions") or []:
        if condition.get("type") != "PodScheduled" or condition.get("status") != "False":
            continue
        if condition.get("reason") != "Unschedulable":
            return None
        message = str(condition.get("message") or "")
        name = _pod_name(pod)
        gpu = _INSUFFICIENT_GPU.search(message)
        if gpu is not None:
            return _Finding(
                Reason.INSUFFICIENT_GPU,
                name,
                _replica_key(pod),
                gpu_product or gpu.group(1),
                message,
                "",
            )
        if _TAINT_ONLY.search(message) and not _OTHER_BLOCKERS.search(message):
            return _Finding(
                Reason.GPU_NODES_UNAVAILABLE,
                name,
                _replica_key(pod),
                gpu_product,
                message,
                "The nodes with the planned GPU type carry taints the pod does not tolerate (usually "
                "NotReady/unreachable nodes or a maintenance taint): wait for them, or add a toleration in "
                "spec.serving.tolerations if the taint is meant to admit this workload.",
            )
        return _Finding(
            Reason.UNSCHEDULABLE,
            name,
            _replica_key(pod),
            gpu_product,
            message,
            "Check spec.serving.nodeSelector and spec.serving.tolerations, that nodes with the planned GPU"
            " type exist and carry its label, and that every PersistentVolumeClaim the pod uses is bound.",
        )
    return None


def _terminated_state(status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The termination to judge a not-ready container on: the current one, else the last one."""
    current = _get(status, "state", "terminated")
    if current:
        return dict(current)
    last = _get(status, "lastState", "terminated")
    if last and (status.get("restartCount") or 0) > 0:
        return dict(last)
    return None


def _memory_fix(container: Mapping[str, Any]) -> str:
    limit = _get(container, "resources", "limits", "memory")
    if limit:
        return (
            f"Raise spec.serving.resources.limits.memory (now {limit}): vLLM stages the weights through"
            " host RAM while loading, and each tensor-parallel worker is a process of its own."
        )
    return (
        "The node ran out of RAM: set spec.serving.resources.requests.memory (and limits.memory) to what"
        " loading needs, so the pod is placed on a node with enough free memory."
    )


def _vllm_finding(
    error: VLLMError, pod: Mapping[str, Any], container: Mapping[str, Any], gpu_product: str, excerpt: str
) -> _Finding:
    name, replica = _pod_name(pod), _replica_key(pod)
    utilization = _arg(container, "--gpu-memory-utilization")
    max_num_seqs = _arg(container, "--max-num-seqs")
    tensor_parallel = _arg(container, "--tensor-parallel-size")
    context = error.max_model_len or _arg(container, "--max-model-len")
    on_gpu = f" on {gpu_product}" if gpu_product else ""
    tp_hint = f" (now {tensor_parallel})" if tensor_parallel else ""
    util_hint = f" (now {utilization})" if utilization else ""

    if error.reason is Reason.CONTEXT_TOO_LONG:
        fitting = error.fitting_tokens or 0
        return _Finding(
            Reason.CONTEXT_TOO_LONG,
            name,
            replica,
            gpu_product,
            f"contextLength {context} needs more KV cache than fits{on_gpu}: at most {fitting} tokens fit.",
            "",
            fitting_tokens=fitting,
        )
    if error.reason is Reason.KV_CACHE_TOO_SMALL:
        return _Finding(
            Reason.KV_CACHE_TOO_SMALL,
            name,
            replica,
            gpu_product,
            f"No GPU memory is left for the KV cache after loading the weights{on_gpu}"
            f" at --gpu-memory-utilization {utilization or '?'}.",
            f"Raise spec.gpu.memoryUtilization{util_hint} towards 0.95, raise spec.gpu.tensorParallelSize"
            f"{tp_hint}, quantize the weights (spec.quantization: fp8) or allow a GPU type with more memory"
            " in spec.gpu.products.",
        )
    if error.reason is Reason.GPU_MEMORY_IN_USE:
        if error.free_fraction is not None:
            target = max(math.floor(error.free_fraction * 100) / 100 - 0.01, 0.0)
            lower = f"lower spec.gpu.memoryUtilization{util_hint} to {target:.2f} or less"
        else:
            lower = f"lower spec.gpu.memoryUtilization{util_hint}"
        return _Finding(
            Reason.GPU_MEMORY_IN_USE,
            name,
            replica,
            gpu_product,
            f"Another process already holds memory on the GPU{on_gpu}: less is free than"
            " --gpu-memory-utilization asks for.",
            f"Find the stale process on that GPU (nvidia-smi on the node), or {lower}.",
        )
    if error.while_loading:
        return _Finding(
            Reason.GPU_OUT_OF_MEMORY,
            name,
            replica,
            gpu_product,
            f"CUDA out of memory while loading the weights{on_gpu}: {excerpt}",
            f"The weights do not fit: raise spec.gpu.tensorParallelSize{tp_hint}, quantize them"
            " (spec.quantization: fp8) or allow a GPU type with more memory in spec.gpu.products.",
        )
    seqs_hint = f" (now {max_num_seqs})" if max_num_seqs else ""
    return _Finding(
        Reason.GPU_OUT_OF_MEMORY,
        name,
        replica,
        gpu_product,
        f"CUDA out of memory{on_gpu}: {excerpt}",
        f"Lower spec.gpu.memoryUtilization{util_hint} to leave headroom for activations and CUDA graphs,"
        f" or lower spec.serving.maxNumSeqs{seqs_hint}.",
    )


def _container_finding(
    pod: Mapping[str, Any], status: Mapping[str, Any], gpu_product: str
) -> _Finding | None:
    if status.get("ready"):
        return None
    name, replica = _pod_name(pod), _replica_key(pod)
    container_name = str(status.get("name") or "")
    container = _container_spec(pod, container_name)
    waiting = _get(status, "state", "waiting") or {}
    waiting_reason = str(waiting.get("reason") or "")
    waiting_message = str(waiting.get("message") or "")

    if waiting_reason in _IMAGE_PULL_REASONS:
        image = status.get("image") or container.get("image") or "?"
        return _Finding(
            Reason.IMAGE_PULL_FAILED,
            name,
            replica,
            gpu_product,
            f"Cannot pull image {image} ({waiting_reason}): {waiting_message}".rstrip(": "),
            "Check spec.serving.image (registry, repository and tag) and the image pull secrets of the"
            " namespace's service account.",
        )
    if waiting_reason in _CONFIG_REASONS:
        return _Finding(
            Reason.CONTAINER_CONFIG_ERROR,
            name,
            replica,
            gpu_product,
            f"{waiting_reason}: {waiting_message}".rstrip(": "),
            "Create the missing Secret or ConfigMap, or fix the reference in spec.serving.apiKeySecretRef"
            " or spec.serving.env.",
        )

    terminated = _terminated_state(status)
    if terminated is None:
        return None
    exit_code = terminated.get("exitCode")
    term_reason = str(terminated.get("reason") or "")
    text = str(terminated.get("message") or "")
    if term_reason == "OOMKilled":
        return _Finding(
            Reason.OOM_KILLED,
            name,
            replica,
            gpu_product,
            f"Container {container_name} was killed for exceeding its host memory (OOMKilled).",
            _memory_fix(container),
        )
    excerpt = log_excerpt(text)
    error = classify_vllm_error(text)
    if error is not None:
        return _vllm_finding(error, pod, container, gpu_product, excerpt)
    if waiting_reason != "CrashLoopBackOff" and exit_code in (0, None):
        return None
    restarts = status.get("restartCount") or 0
    detail = f"Container {container_name} exited with code {exit_code}"
    if term_reason:
        detail += f" ({term_reason})"
    detail += f", {_plural(int(restarts), 'restart')}"
    if exit_code == 137:
        detail += "; exit code 137 is SIGKILL: a failed liveness/startup probe or the OOM killer"
    detail += f": {excerpt}" if excerpt else "; no termination message"
    return _Finding(
        Reason.CRASH_LOOP,
        name,
        replica,
        gpu_product,
        detail,
        f"Read `kubectl logs --previous {name} -c {container_name}`; the end of the last termination"
        " message is quoted above.",
    )


def _pod_findings(pod: Mapping[str, Any]) -> list[_Finding]:
    if _get(pod, "metadata", "deletionTimestamp"):
        return []  # terminating during a rollout or scale-down
    if _get(pod, "status", "phase") in ("Succeeded", "Failed"):
        return []  # evicted or finished: the workload controller replaces it
    labels = _get(pod, "metadata", "labels") or {}
    gpu_product = str(labels.get(LABEL_GPU_PRODUCT) or "")
    scheduling = _scheduling_finding(pod, gpu_product)
    if scheduling is not None:
        return [scheduling]
    statuses = list(_get(pod, "status", "initContainerStatuses") or []) + list(
        _get(pod, "status", "containerStatuses") or []
    )
    findings: list[_Finding] = []
    for status in statuses:
        finding = _container_finding(pod, status, gpu_product)
        if finding is not None and all(f.reason != finding.reason for f in findings):
            findings.append(finding)
    return findings


# --- grouping ----------------------------------------------------------------------------------


def _truncate(text: str, limit: int = MAX_MESSAGE_LENGTH) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _insufficient_gpu(findings: Sequence[_Finding]) -> tuple[str, str]:
    replicas_by_type: dict[str, set[str]] = {}
    for finding in findings:
        replicas_by_type.setdefault(finding.gpu_product or "?", set()).add(finding.replica)
    parts = [
        f"Insufficient GPUs of type {gpu}: {_plural(len(replicas), 'replica')} pending"
        for gpu, replicas in sorted(replicas_by_type.items())
    ]
    scheduler = findings[0].detail
    message = "; ".join(parts) + (f" (scheduler: {scheduler})" if scheduler else "")
    types = ", ".join(sorted(replicas_by_type))
    fix = (
        f"Add nodes with {types} GPUs or free some, lower spec.replicas (or autoscaling.maxReplicas),"
        " or allow other GPU products in spec.gpu.products."
    )
    return message, fix


def _context_too_long(findings: Sequence[_Finding]) -> tuple[str, str]:
    # One contextLength serves every variant: it must fit the tightest GPU type.
    tightest = min(findings, key=lambda f: (f.fitting_tokens or 0, f.pod))
    fitting = tightest.fitting_tokens or 0
    fix = (
        f"Lower spec.contextLength to at most {fitting} (e.g. {_round_down_context(fitting)}),"
        " or raise spec.gpu.tensorParallelSize, use spec.kvCacheDtype: fp8, or raise"
        " spec.gpu.memoryUtilization."
    )
    return tightest.detail, fix


def _generic(findings: Sequence[_Finding]) -> tuple[str, str]:
    details = list(dict.fromkeys(f.detail for f in findings))
    message = details[0]
    if len(details) > 1:
        message += f" (and {_plural(len(details) - 1, 'other message')})"
    return message, findings[0].fix


def diagnose_pods(pods: Iterable[Mapping[str, Any]]) -> list[Diagnosis]:
    """Group what is wrong with ``pods`` by reason, in ``REASON_ORDER``; [] when nothing is."""
    by_reason: dict[Reason, list[_Finding]] = {}
    for pod in pods:
        for finding in _pod_findings(pod):
            by_reason.setdefault(finding.reason, []).append(finding)
    diagnoses: list[Diagnosis] = []
    for reason in REASON_ORDER:
        findings = sorted(by_reason.get(reason, []), key=lambda f: f.pod)
        if not findings:
            continue
        if reason is Reason.INSUFFICIENT_GPU:
            message, fix = _insufficient_gpu(findings)
        elif reason is Reason.CONTEXT_TOO_LONG:
            message, fix = _context_too_long(findings)
        else:
            message, fix = _generic(findings)
        pods_concerned = tuple(sorted({f.pod for f in findings}))
        diagnoses.append(Diagnosis(str(reason), _truncate(message), _truncate(fix), pods_concerned))
    return diagnoses
