"""Cloud GPU machine shapes: instance type name -> GPU type, GPUs per machine, vCPUs, memory.

Data lives in ``catalog/data/instance_types.yaml``. The planner uses it to read a node
autoscaler's pool ("this Karpenter NodePool may launch p5.48xlarge") as GPUs it can add.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources

import yaml

from glm_operator.catalog.gpus import GpuType, find_gpu


@dataclass(frozen=True)
class InstanceType:
    name: str
    gpu: GpuType
    gpus: int
    cpu: int
    memory_gib: int


@functools.cache
def load_instance_types() -> dict[str, InstanceType]:
    """All catalog instance types by name, parsed once per process."""
    text = (
        resources.files("glm_operator.catalog")
        .joinpath("data", "instance_types.yaml")
        .read_text(encoding="utf-8")
    )
    out: dict[str, InstanceType] = {}
    for item in yaml.safe_load(text)["instance_types"]:
        it = InstanceType(
            name=str(item["name"]),
            gpu=find_gpu(str(item["gpu"])),
            gpus=int(item["gpus"]),
            cpu=int(item["cpu"]),
            memory_gib=int(item["memory_gib"]),
        )
        out[it.name] = it
    return out


def find_instance_type(name: str) -> InstanceType | None:
    return load_instance_types().get(name)
