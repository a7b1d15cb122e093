"""GPU catalog: usable memory, compute capability, precision support, interconnect and node labels.

Data lives in ``catalog/data/gpus.yaml`` (see its header for where each memory figure comes from).
Lookups by catalog name or alias are case-insensitive; :func:`gpu_from_labels` recognises a node's
GPU type from the labels GPU Feature Discovery, GKE, EKS or Karpenter write, and
:func:`gpu_from_resource_name` from a per-type device-plugin resource (``nvidia.com/rtx-4090``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources

import yaml

from glm_operator.catalog.models import CatalogError

#: Prefix of every NVIDIA device-plugin resource (whole GPUs, per-type names, MIG slices).
NVIDIA_RESOURCE_PREFIX = "nvidia.com/"
#: The resource the NVIDIA device plugin advertises whole GPUs as; cloud GPU node pools taint their
#: nodes with the same key.
GPU_RESOURCE = f"{NVIDIA_RESOURCE_PREFIX}gpu"
GFD_PRODUCT_LABEL = "nvidia.com/gpu.product"
GKE_ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
EKS_ACCELERATOR_LABEL = "k8s.amazonaws.com/accelerator"
KARPENTER_GPU_NAME_LABEL = "karpenter.k8s.aws/instance-gpu-name"
KARPENTER_GPU_MEMORY_LABEL = "karpenter.k8s.aws/instance-gpu-memory"

#: label keys checked in this order to recognise a node's GPU type (catalog key -> node label)
PRODUCT_LABELS: tuple[tuple[str, str], ...] = (
    ("gfd", GFD_PRODUCT_LABEL),
    ("gke", GKE_ACCELERATOR_LABEL),
    ("eks", EKS_ACCELERATOR_LABEL),
    ("karpenter", KARPENTER_GPU_NAME_LABEL),
)


@dataclass(frozen=True)
class GpuType:
    """One GPU type. ``memory_gib`` is torch's ``total_memory`` (what vLLM multiplies by util)."""

    name: str
    aliases: tuple[str, ...]
    memory_gib: float
    memory_source: str
    compute_capability: float
    bf16: bool
    fp8: bool
    interconnect: str
    labels: tuple[tuple[str, str], ...]
    resource_names: tuple[str, ...]
    karpenter_gpu_memory_mib: int = 0
    memory_bandwidth_gbs: float = 0.0  # datasheet, GB/s
    bf16_tflops: float = 0.0  # datasheet, dense
    fp8_tflops: float = 0.0  # datasheet, dense; 0 without FP8 tensor cores

    @property
    def nvlink(self) -> bool:
        return self.interconnect == "nvlink"

    @property
    def native_fp8(self) -> bool:
        """W8A8 FP8 GEMMs need compute capability >= 8.9 (Ada, Hopper, Blackwell)."""
        return self.fp8 and self.compute_capability >= 8.9

    def label(self, kind: str) -> str | None:
        return dict(self.labels).get(kind)


@functools.cache
def load_gpus() -> tuple[GpuType, ...]:
    """All catalog GPU types, parsed once per process."""
    text = resources.files("glm_operator.catalog").joinpath("data", "gpus.yaml").read_text(encoding="utf-8")
    raw = yaml.safe_load(text)
    gpus = []
    for item in raw["gpus"]:
        gpus.append(
            GpuType(
                name=str(item["name"]),
                aliases=tuple(str(a) for a in item.get("aliases", [])),
                memory_gib=float(item["memory_gib"]),
                memory_source=str(item.get("memory_source", "")),
                compute_capability=float(item["compute_capability"]),
                bf16=bool(item.get("bf16", True)),
                fp8=bool(item.get("fp8", False)),
                interconnect=str(item.get("interconnect", "pcie")),
                labels=tuple((str(k), str(v)) for k, v in (item.get("labels") or {}).items()),
                resource_names=tuple(str(r) for r in item.get("resource_names", [])),
                karpenter_gpu_memory_mib=int(item.get("karpenter_gpu_memory_mib", 0)),
                memory_bandwidth_gbs=float((item.get("speed") or {}).get("memory_bandwidth_gbs", 0)),
                bf16_tflops=float((item.get("speed") or {}).get("bf16_tflops", 0)),
                fp8_tflops=float((item.get("speed") or {}).get("fp8_tflops", 0)),
            )
        )
    return tuple(gpus)


@functools.cache
def _name_index() -> dict[str, GpuType]:
    index: dict[str, GpuType] = {}
    for gpu in load_gpus():
        for key in (gpu.name, *gpu.aliases):
            index.setdefault(key.lower(), gpu)
        gfd = gpu.label("gfd")
        if gfd:
            index.setdefault(gfd.lower(), gpu)
    return index


@functools.cache
def _label_index() -> dict[tuple[str, str], tuple[GpuType, ...]]:
    index: dict[tuple[str, str], list[GpuType]] = {}
    for gpu in load_gpus():
        for kind, value in gpu.labels:
            index.setdefault((kind, value.lower()), []).append(gpu)
    return {k: tuple(v) for k, v in index.items()}


@functools.cache
def _resource_index() -> dict[str, GpuType]:
    return {r.lower(): gpu for gpu in load_gpus() for r in gpu.resource_names}


def gpu_names() -> list[str]:
    return [g.name for g in load_gpus()]


def find_gpu(name: str) -> GpuType:
    """GPU type by catalog name, alias or GFD product label (case-insensitive)."""
    gpu = _name_index().get(name.strip().lower())
    if gpu is None:
        raise CatalogError(f"GPU {name!r} is not in the catalog; use one of {', '.join(gpu_names())}")
    return gpu


def _strip_gfd_suffix(value: str) -> str:
    # GFD appends -SHARED with time-slicing/MPS, and MIG profiles as -MIG-...; the base product decides.
    for suffix in ("-SHARED",):
        if value.upper().endswith(suffix):
            value = value[: -len(suffix)]
    return value.split("-MIG-")[0]


def gpu_from_labels(labels: Mapping[str, str]) -> tuple[GpuType | None, str, str]:
    """Recognise the GPU type from node labels.

    Returns ``(gpu or None, label key, label value)``: the key/value that identified it (and that a
    nodeSelector can pin), or the first GPU label seen when its value is not in the catalog.
    """
    first_seen: tuple[str, str] = ("", "")
    for kind, key in PRODUCT_LABELS:
        value = labels.get(key)
        if not value:
            continue
        if not first_seen[0]:
            first_seen = (key, value)
        lookup = _strip_gfd_suffix(value) if kind == "gfd" else value
        candidates = _label_index().get((kind, lookup.lower()), ())
        if kind == "gfd" and not candidates:
            hit = _name_index().get(lookup.lower())
            candidates = (hit,) if hit else ()
        if len(candidates) > 1:
            memory = labels.get(KARPENTER_GPU_MEMORY_LABEL, "")
            narrowed = tuple(c for c in candidates if memory and str(c.karpenter_gpu_memory_mib) == memory)
            # same label for two types (EKS/Karpenter "a100"): the memory label decides, else the first
            candidates = narrowed or candidates
        if candidates:
            return candidates[0], key, value
    return None, first_seen[0], first_seen[1]


def gpu_from_resource_name(resource_name: str) -> GpuType | None:
    """GPU type of a per-type device-plugin resource such as ``nvidia.com/rtx-4090``."""
    return _resource_index().get(resource_name.lower())
