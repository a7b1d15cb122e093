"""Step 3 of the pipeline: which existing children go (pure).

Children the plan no longer wants (a GPU type that lost all its replicas, a PodMonitor no longer
rendered) are pruned. While the spec is unchanged (a capacity change moved the replicas), a child
with Ready replicas is pruned only once the replicas that replace it are Ready: make before break.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from glm_operator.desired.children import child_ref, replica_sum
from glm_operator.desired.model import ChildRef


def kept_children(
    children: Sequence[Mapping[str, Any]], objects: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """The current workloads the plan still wants."""
    wanted = {child_ref(o) for o in objects}
    return [c for c in children if child_ref(c) in wanted]


def children_to_prune(
    children: Sequence[Mapping[str, Any]],
    pod_monitors: Sequence[Mapping[str, Any]],
    objects: Sequence[Mapping[str, Any]],
    *,
    spec_unchanged: bool,
    replacements_ready: bool,
) -> tuple[ChildRef, ...]:
    wanted = {child_ref(o) for o in objects}
    unwanted = [c for c in children if child_ref(c) not in wanted]
    if spec_unchanged and not replacements_ready:  # make before break: the replacement is not ready yet
        unwanted = [c for c in unwanted if replica_sum([c], "readyReplicas") == 0]
    unwanted += [m for m in pod_monitors if child_ref(m) not in wanted]
    return tuple(sorted(child_ref(c) for c in unwanted))
