"""GPU types that are not in the catalog, estimated from the node's own labels.

GPU Feature Discovery labels every GPU node with ``nvidia.com/gpu.memory`` (MiB, as nvidia-smi
reports it) and ``nvidia.com/gpu.compute.major``/``.minor``; Karpenter's AWS provider writes
``karpenter.k8s.aws/instance-gpu-memory`` (MiB). From these the planner can still size a GPU it
does not know (A800, L20, a new product): memory as the catalog estimates it (MiB / 1024 minus the
0.46 GiB the driver reserves), bf16 from compute capability 8.0, native FP8 from 8.9, and PCIe
(the conservative interconnect: TP > 2 is penalised). Without a memory label or without a compute
capability there is nothing to plan with: ``estimate_gpu`` returns the reason instead.
"""

from __future__ import annotations

from collections.abc import Mapping

from glm_operator.catalog.gpus import GFD_PRODUCT_LABEL, KARPENTER_GPU_MEMORY_LABEL, GpuType

GFD_MEMORY_LABEL = "nvidia.com/gpu.memory"
GFD_COMPUTE_MAJOR_LABEL = "nvidia.com/gpu.compute.major"
GFD_COMPUTE_MINOR_LABEL = "nvidia.com/gpu.compute.minor"
DRIVER_RESERVED_GIB = 0.46
NOT_IN_CATALOG = "not in catalog: estimated from labels"


def _int_label(labels: Mapping[str, str], key: str) -> int | None:
    value = labels.get(key, "")
    return int(value) if value.isdigit() else None


def estimate_gpu(name: str, labels: Mapping[str, str]) -> tuple[GpuType | None, str]:
    """``(GpuType, how it was estimated)`` for an unknown product ``name``, or ``(None, why not)``."""
    memory_key = GFD_MEMORY_LABEL if _int_label(labels, GFD_MEMORY_LABEL) else KARPENTER_GPU_MEMORY_LABEL
    memory_mib = _int_label(labels, memory_key)
    major = _int_label(labels, GFD_COMPUTE_MAJOR_LABEL)
    minor = _int_label(labels, GFD_COMPUTE_MINOR_LABEL) or 0
    missing = []
    if not memory_mib:
        missing.append(f"{GFD_MEMORY_LABEL} (or {KARPENTER_GPU_MEMORY_LABEL})")
    if major is None:
        missing.append(f"{GFD_COMPUTE_MAJOR_LABEL}/minor")
    if memory_mib is None or major is None or missing:
        return None, (
            f"GPU type {name!r} is not in the catalog and the node lacks {' and '.join(missing)}: "
            "nothing to estimate it from; label the node with GPU Feature Discovery or use a catalog GPU"
        )
    capability = major + minor / 10
    memory_gib = round(memory_mib / 1024 - DRIVER_RESERVED_GIB, 2)
    how = (
        f"{NOT_IN_CATALOG} ({memory_gib:g} GiB from {memory_key}={memory_mib}, compute capability "
        f"{capability:g}, PCIe assumed)"
    )
    gpu = GpuType(
        name=name,
        aliases=(),
        memory_gib=memory_gib,
        memory_source=how,
        compute_capability=capability,
        bf16=capability >= 8.0,
        fp8=capability >= 8.9,
        interconnect="pcie",
        labels=(("gfd", name),) if labels.get(GFD_PRODUCT_LABEL) == name else (),
        resource_names=(),
    )
    return gpu, how
