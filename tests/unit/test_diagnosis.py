"""Diagnosis table tests on pod JSON shaped like the Kubernetes API returns it."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from glm_operator.planning.diagnosis.pods import (
    CAPACITY_REASONS,
    Diagnosis,
    Reason,
    classify_vllm_error,
    diagnose_pods,
    log_excerpt,
)

H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"

VLLM_ARGS = [
    "zai-org/GLM-4.5-Air",
    "--served-model-name",
    "glm-4.5-air",
    "--host",
    "0.0.0.0",
    "--port",
    "8000",
    "--tensor-parallel-size",
    "2",
    "--max-model-len",
    "131072",
    "--gpu-memory-utilization",
    "0.9",
    "--max-num-seqs",
    "64",
]


def pod(
    name: str,
    *,
    gpu: str = H100,
    phase: str = "Running",
    conditions: list[dict[str, Any]] | None = None,
    container_statuses: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
    memory_limit: str | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    resources: dict[str, Any] = {"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "2"}}
    if memory_limit is not None:
        resources["limits"]["memory"] = memory_limit
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": "llm",
        "uid": f"uid-{name}",
        "labels": {
            "app.kubernetes.io/name": "vllm",
            "app.kubernetes.io/instance": "glm-air",
            "app.kubernetes.io/component": "inference",
            "inference.glm.dev/variant": "h100-80gb",
            "inference.glm.dev/gpu-product": gpu,
            "pod-template-hash": "5d9f7c8b6d",
            **(labels or {}),
        },
        "creationTimestamp": "2026-11-30T10:00:00Z",
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-30T10:05:00Z"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "containers": [
                {
                    "name": "vllm",
                    "image": "vllm/vllm-openai:v0.10.1",
                    "command": ["vllm", "serve"],
                    "args": VLLM_ARGS,
                    "resources": resources,
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                }
            ],
            "nodeName": None if phase == "Pending" else "h100-sxm-0",
        },
        "status": {
            "phase": phase,
            "conditions": conditions
            if conditions is not None
            else [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-30T10:00:01Z"},
                {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-11-30T10:00:01Z"},
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
            ],
            **({"containerStatuses": container_statuses} if container_statuses is not None else {}),
        },
    }


def unschedulable(name: str, message: str, **kwargs: Any) -> dict[str, Any]:
    return pod(
        name,
        phase="Pending",
        conditions=[
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastProbeTime": None,
                "lastTransitionTime": "2026-11-30T10:00:01Z",
            }
        ],
        **kwargs,
    )


def crashed(
    name: str, message: str, *, reason: str = "Error", exit_code: int = 1, **kwargs: Any
) -> dict[str, Any]:
    """A vLLM container in CrashLoopBackOff whose last run ended with ``message`` in its log tail."""
    return pod(
        name,
        container_statuses=[
            {
                "name": "vllm",
                "image": "docker.io/vllm/vllm-openai:v0.10.1",
                "imageID": "docker.io/vllm/vllm-openai@sha256:0123",
                "containerID": "containerd://abc",
                "ready": False,
                "started": False,
                "restartCount": 4,
                "state": {
                    "waiting": {
                        "reason": "CrashLoopBackOff",
                        "message": "back-off 1m20s restarting failed container=vllm pod=" + name,
                    }
                },
                "lastState": {
                    "terminated": {
                        "exitCode": exit_code,
                        "reason": reason,
                        "message": message,
                        "startedAt": "2026-11-30T10:01:00Z",
                        "finishedAt": "2026-11-30T10:03:10Z",
                        "containerID": "containerd://abc",
                    }
                },
            }
        ],
        **kwargs,
    )


def waiting(name: str, reason: str, message: str) -> dict[str, Any]:
    return pod(
        name,
        phase="Pending",
        container_statuses=[
            {
                "name": "vllm",
                "image": "vllm/vllm-openai:v9.9.9",
                "imageID": "",
                "ready": False,
                "started": False,
                "restartCount": 0,
                "state": {"waiting": {"reason": reason, "message": message}},
                "lastState": {},
            }
        ],
    )


def healthy(name: str) -> dict[str, Any]:
    return pod(
        name,
        conditions=[{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
        container_statuses=[
            {
                "name": "vllm",
                "image": "vllm/vllm-openai:v0.10.1",
                "ready": True,
                "started": True,
                "restartCount": 1,
                "state": {"running": {"startedAt": "2026-11-30T10:10:00Z"}},
                # an old crash does not matter once the container is ready
                "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
            }
        ],
    )


V1_CONTEXT_LOG = "\n".join(
    [
        "(EngineCore_DP0 pid=268) INFO 11-30 10:02:55 [gpu_worker.py:298]"
        " Available KV cache memory: 8.04 GiB",
        "(EngineCore_DP0 pid=268) ERROR 11-30 10:03:05 [core.py:708] EngineCore failed to start.",
        "(EngineCore_DP0 pid=268) ERROR 11-30 10:03:05 [core.py:708] ValueError:"
        " To serve at least one request with the models's max seq len (131072),"
        " (24.00 GiB KV cache is needed, which is larger than the available KV cache memory (8.04 GiB)."
        " Based on the available memory, the estimated maximum model length is 87840."
        " Try increasing `gpu_memory_utilization` or decreasing `max_model_len`"
        " when initializing the engine.",
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
    ]
)

V0_CONTEXT_LOG = (
    "ValueError: The model's max seq len (131072) is larger than the maximum number of tokens that can be"
    " stored in KV cache (24480). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when"
    " initializing the engine."
)

NO_BLOCKS_LOG = "\n".join(
    [
        "INFO 11-30 10:02:50 [gpu_worker.py:276] Available KV cache memory: -0.30 GiB",
        "ERROR 11-30 10:02:50 [core.py:700] ValueError: No available memory for the cache blocks. Try"
        " increasing `gpu_memory_utilization` when initializing the engine.",
    ]
)

CUDA_OOM_RUNTIME_LOG = (
    "ERROR 11-30 12:00:00 [core.py:700] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"
    " 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 17.88 MiB is free."
)

CUDA_OOM_LOADING_LOG = "\n".join(
    [
        "INFO 11-30 10:01:00 [gpu_model_runner.py:1953] Starting to load model zai-org/GLM-4.5-Air...",
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/model_loader/base_loader.py",'
        " line 44, in load_model",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.16 GiB. GPU 0 has a total"
        " capacity of 79.10 GiB",
    ]
)

FREE_MEMORY_LOG = (
    "(EngineCore pid=17635) ValueError: Free memory on device cuda:0 (15.32/22.04 GiB) on startup is less"
    " than desired GPU memory utilization (0.88, 19.39 GiB). Decrease GPU memory utilization or reduce GPU"
    " memory used by other processes."
)


def reasons(diagnoses: list[Diagnosis]) -> list[str]:
    return [d.reason for d in diagnoses]


def test_insufficient_gpu_counts_replicas_per_type() -> None:
    message = (
        "0/9 nodes are available: 3 node(s) had untolerated taint {node-role: cpu},"
        " 6 Insufficient nvidia.com/gpu."
    )
    pods = [
        unschedulable("glm-air-h100-80gb-5d9f7c8b6d-aaaaa", message),
        unschedulable("glm-air-h100-80gb-5d9f7c8b6d-bbbbb", message),
        unschedulable("glm-air-a100-80gb-7c4b9d6f5-ccccc", message, gpu=A100),
        healthy("glm-air-h100-80gb-5d9f7c8b6d-ddddd"),
    ]
    [diagnosis] = diagnose_pods(pods)
    assert diagnosis.reason == "InsufficientGPU"
    assert diagnosis.message.startswith(
        f"Insufficient GPUs of type {A100}: 1 replica pending;"
        f" Insufficient GPUs of type {H100}: 2 replicas pending"
    )
    assert "6 Insufficient nvidia.com/gpu" in diagnosis.message
    assert "spec.gpu.products" in diagnosis.fix and "replicas" in diagnosis.fix
    assert diagnosis.pods == (
        "glm-air-a100-80gb-7c4b9d6f5-ccccc",
        "glm-air-h100-80gb-5d9f7c8b6d-aaaaa",
        "glm-air-h100-80gb-5d9f7c8b6d-bbbbb",
    )
    assert "InsufficientGPU" in CAPACITY_REASONS


def test_insufficient_gpu_per_type_resource_without_label() -> None:
    p = unschedulable(
        "mixed-0-pod", "0/9 nodes are available: 1 Insufficient nvidia.com/a100-80gb, 8 node(s) ..."
    )
    del p["metadata"]["labels"]["inference.glm.dev/gpu-product"]
    [diagnosis] = diagnose_pods([p])
    assert "of type nvidia.com/a100-80gb: 1 replica pending" in diagnosis.message


def test_leaderworkerset_group_counts_as_one_replica() -> None:
    message = "0/9 nodes are available: 9 Insufficient nvidia.com/gpu."
    group = {
        "leaderworkerset.sigs.k8s.io/name": "glm-46-h100-80gb",
        "leaderworkerset.sigs.k8s.io/group-index": "0",
    }
    pods = [
        unschedulable("glm-46-h100-80gb-0", message, labels=group),
        unschedulable("glm-46-h100-80gb-0-1", message, labels=group),
    ]
    [diagnosis] = diagnose_pods(pods)
    assert f"{H100}: 1 replica pending" in diagnosis.message
    assert len(diagnosis.pods) == 2


def test_other_unschedulable() -> None:
    message = "0/9 nodes are available: 9 node(s) didn't match Pod's node affinity/selector."
    [diagnosis] = diagnose_pods([unschedulable("p1", message)])
    assert diagnosis.reason == "Unschedulable"
    assert diagnosis.message == message
    assert "nodeSelector" in diagnosis.fix


@pytest.mark.parametrize(
    ("waiting_reason", "message"),
    [
        ("ImagePullBackOff", 'Back-off pulling image "vllm/vllm-openai:v9.9.9"'),
        ("ErrImagePull", "rpc error: code = NotFound desc = failed to pull and unpack image: not found"),
        ("InvalidImageName", 'Failed to apply default image tag "vllm/VLLM:": invalid reference format'),
    ],
)
def test_image_pull_failures(waiting_reason: str, message: str) -> None:
    [diagnosis] = diagnose_pods([waiting("p1", waiting_reason, message)])
    assert diagnosis.reason == "ImagePullFailed"
    assert diagnosis.message == f"Cannot pull image vllm/vllm-openai:v9.9.9 ({waiting_reason}): {message}"
    assert "spec.serving.image" in diagnosis.fix and "pull secret" in diagnosis.fix


def test_missing_api_key_secret() -> None:
    [diagnosis] = diagnose_pods([waiting("p1", "CreateContainerConfigError", 'secret "glm-api" not found')])
    assert diagnosis.reason == "ContainerConfigError"
    assert 'secret "glm-api" not found' in diagnosis.message
    assert "apiKeySecretRef" in diagnosis.fix


def test_oom_killed_host_ram_with_limit() -> None:
    p = crashed("p1", "", reason="OOMKilled", exit_code=137, memory_limit="64Gi")
    [diagnosis] = diagnose_pods([p])
    assert diagnosis.reason == "OOMKilled"
    assert "limits.memory (now 64Gi)" in diagnosis.fix


def test_oom_killed_without_limit() -> None:
    [diagnosis] = diagnose_pods([crashed("p1", "", reason="OOMKilled", exit_code=137)])
    assert "requests.memory" in diagnosis.fix


def test_context_too_long_v1_parses_estimate() -> None:
    [diagnosis] = diagnose_pods([crashed("p1", V1_CONTEXT_LOG)])
    assert diagnosis.reason == "ContextTooLong"
    assert (
        diagnosis.message
        == f"contextLength 131072 needs more KV cache than fits on {H100}: at most 87840 tokens fit."
    )
    assert diagnosis.fix.startswith("Lower spec.contextLength to at most 87840 (e.g. 87040)")
    assert "kvCacheDtype: fp8" in diagnosis.fix and "tensorParallelSize" in diagnosis.fix


def test_context_too_long_v0_and_tightest_gpu_wins() -> None:
    pods = [crashed("h100-pod", V1_CONTEXT_LOG), crashed("a100-pod", V0_CONTEXT_LOG, gpu=A100)]
    [diagnosis] = diagnose_pods(pods)
    assert "at most 24480" in diagnosis.fix
    assert A100 in diagnosis.message
    assert diagnosis.pods == ("a100-pod", "h100-pod")


def test_kv_cache_too_small() -> None:
    [diagnosis] = diagnose_pods([crashed("p1", NO_BLOCKS_LOG)])
    assert diagnosis.reason == "KVCacheTooSmall"
    assert "--gpu-memory-utilization 0.9" in diagnosis.message
    assert "Raise spec.gpu.memoryUtilization (now 0.9)" in diagnosis.fix
    assert "tensorParallelSize (now 2)" in diagnosis.fix


def test_cuda_oom_at_runtime_lowers_utilization_or_seqs() -> None:
    [diagnosis] = diagnose_pods([crashed("p1", CUDA_OOM_RUNTIME_LOG)])
    assert diagnosis.reason == "GPUOutOfMemory"
    assert "Lower spec.gpu.memoryUtilization (now 0.9)" in diagnosis.fix
    assert "maxNumSeqs (now 64)" in diagnosis.fix
    assert "Tried to allocate 2.00 GiB" in diagnosis.message


def test_cuda_oom_while_loading_asks_for_more_gpus() -> None:
    [diagnosis] = diagnose_pods([crashed("p1", CUDA_OOM_LOADING_LOG)])
    assert diagnosis.reason == "GPUOutOfMemory"
    assert "while loading the weights" in diagnosis.message
    assert "raise spec.gpu.tensorParallelSize (now 2)" in diagnosis.fix


def test_gpu_memory_in_use_suggests_fraction() -> None:
    [diagnosis] = diagnose_pods([crashed("p1", FREE_MEMORY_LOG)])
    assert diagnosis.reason == "GPUMemoryInUse"
    assert "to 0.68 or less" in diagnosis.fix  # 15.32 / 22.04 = 0.695 -> 0.69 - 0.01


def test_unknown_crash_quotes_the_last_error_line() -> None:
    log = (
        "INFO 11-30 10:00:01 [api_server.py:1] vLLM API server version 0.10.1\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/local/bin/vllm", line 8, in <module>\n'
        "KeyError: 'glm4_moe'\n"
        "RuntimeError: Engine core initialization failed. See root cause above.\n"
    )
    [diagnosis] = diagnose_pods([crashed("p1", log)])
    assert diagnosis.reason == "CrashLoop"
    assert diagnosis.message == "Container vllm exited with code 1 (Error), 4 restarts: KeyError: 'glm4_moe'"
    assert "kubectl logs --previous p1 -c vllm" in diagnosis.fix


def test_sigkill_without_message_is_explained() -> None:
    [diagnosis] = diagnose_pods([crashed("p1", "", exit_code=137)])
    assert diagnosis.reason == "CrashLoop"
    assert "SIGKILL" in diagnosis.message and "no termination message" in diagnosis.message


def test_loading_pod_running_not_ready_is_not_a_problem() -> None:
    loading = pod(
        "p1",
        container_statuses=[
            {
                "name": "vllm",
                "ready": False,
                "started": False,
                "restartCount": 0,
                "state": {"running": {"startedAt": "2026-11-30T10:00:05Z"}},
                "lastState": {},
            }
        ],
    )
    container_creating = waiting("p2", "ContainerCreating", "")
    assert diagnose_pods([loading, container_creating, healthy("p3")]) == []


def test_restarting_pod_keeps_its_diagnosis_between_crashes() -> None:
    p = crashed("p1", NO_BLOCKS_LOG)
    status = p["status"]["containerStatuses"][0]
    status["state"] = {"running": {"startedAt": "2026-11-30T10:05:00Z"}}  # next attempt, still loading
    assert reasons(diagnose_pods([p])) == ["KVCacheTooSmall"]


def test_terminating_and_evicted_pods_are_ignored() -> None:
    evicted = crashed("p2", NO_BLOCKS_LOG)
    evicted["status"]["phase"] = "Failed"
    evicted["status"]["reason"] = "Evicted"
    assert diagnose_pods([crashed("p1", NO_BLOCKS_LOG, deleting=True), evicted]) == []


def test_grouped_by_reason_in_layer_order_whatever_the_input_order() -> None:
    pods = [
        crashed("c", CUDA_OOM_RUNTIME_LOG),
        waiting("b", "ImagePullBackOff", "Back-off pulling image"),
        unschedulable("a", "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."),
        crashed("d", NO_BLOCKS_LOG),
        crashed("e", NO_BLOCKS_LOG),
        crashed("f", V1_CONTEXT_LOG),
    ]
    expected = diagnose_pods(pods)
    assert reasons(expected) == [
        "InsufficientGPU",
        "ImagePullFailed",
        "GPUOutOfMemory",
        "KVCacheTooSmall",
        "ContextTooLong",
    ]
    assert expected[3].pods == ("d", "e")
    rng = random.Random(7)
    for _ in range(10):
        shuffled = copy.deepcopy(pods)
        rng.shuffle(shuffled)
        assert diagnose_pods(shuffled) == expected


def test_reason_values_are_camel_case() -> None:
    assert [r.value for r in Reason] == [
        "InsufficientGPU",
        "GPUNodesUnavailable",
        "Unschedulable",
        "ImagePullFailed",
        "ContainerConfigError",
        "OOMKilled",
        "GPUMemoryInUse",
        "GPUOutOfMemory",
        "KVCacheTooSmall",
        "ContextTooLong",
        "CrashLoop",
    ]


@pytest.mark.parametrize(
    ("text", "reason", "fitting"),
    [
        (V1_CONTEXT_LOG, Reason.CONTEXT_TOO_LONG, 87840),
        (V0_CONTEXT_LOG, Reason.CONTEXT_TOO_LONG, 24480),
        (
            "ValueError: To serve at least one request with the model's max seq len (8192), (18.00 GiB KV"
            " cache is needed, which is larger than the available KV cache memory (0.01 GiB). Try increasing",
            Reason.KV_CACHE_TOO_SMALL,
            None,
        ),
        (NO_BLOCKS_LOG, Reason.KV_CACHE_TOO_SMALL, None),
        (CUDA_OOM_RUNTIME_LOG, Reason.GPU_OUT_OF_MEMORY, None),
        (FREE_MEMORY_LOG, Reason.GPU_MEMORY_IN_USE, None),
    ],
)
def test_classify_vllm_error(text: str, reason: Reason, fitting: int | None) -> None:
    error = classify_vllm_error(text)
    assert error is not None
    assert error.reason is reason
    assert error.fitting_tokens == fitting


def test_classify_unknown_and_excerpt() -> None:
    assert classify_vllm_error("all good") is None
    assert log_excerpt("") == ""
    assert log_excerpt("a\nb\n") == "b"
    assert len(log_excerpt("x" * 1000)) == 300


def test_pods_blocked_only_by_taints_on_the_gpu_nodes_are_a_capacity_problem() -> None:
    from glm_operator.planning.diagnosis.conditions import summarize
    from glm_operator.planning.diagnosis.pods import CAPACITY_REASONS, diagnose_pods

    message = (
        "0/1000 nodes are available: 342 node(s) didn't match Pod's node affinity/selector, 658 node(s) had "
        "untolerated taint(s). preemption: 0/1000 nodes are available: 1000 Preemption is not helpful."
    )
    pod = {
        "metadata": {"name": "p-1", "labels": {}},
        "spec": {"containers": [{"name": "vllm", "args": []}]},
        "status": {
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
            ],
        },
    }
    (diagnosis,) = diagnose_pods([pod])
    assert diagnosis.reason == "GPUNodesUnavailable" and diagnosis.reason in CAPACITY_REASONS
    phase, _ = summarize(True, "Planned", 1, 0, 0, [diagnosis], 1, [], "2026-11-30T00:00:00Z")
    assert phase == "Degraded"  # not Failed: no spec change is needed
    volume = {
        **pod,
        "status": {
            **pod["status"],
            "conditions": [
                {
                    **pod["status"]["conditions"][0],
                    "message": message.replace(
                        "had untolerated taint(s)",
                        'had untolerated taint(s), 1 persistentvolumeclaim "w" not found',
                    ),
                }
            ],
        },
    }
    assert diagnose_pods([volume])[0].reason == "Unschedulable"
