"""controller.timeline: the per-key stamps the controller bench lines up with its own marks."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from glm_operator.controller import timeline
from glm_operator.controller.config import OperatorConfig
from glm_operator.controller.runtime import Operator
from tests.bench_module import controller_bench
from tests.unit.test_slow_applies import BODY, NODES, SlowServiceApi


@pytest.fixture
def timeline_file(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "timeline.jsonl"
    timeline.configure(str(path))
    yield path
    timeline.configure(None)


def _lines(path: Path) -> list[list[Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_nothing_is_written_unless_enabled_and_a_timed_write_stamps_around_its_request(
    tmp_path: Path,
) -> None:
    path = tmp_path / "off.jsonl"
    timeline.configure(None)
    timeline.stamp(("ns", "a"), "take")
    assert not timeline.enabled() and not path.exists()

    timeline.configure(str(path))
    try:

        def refused(_: Any) -> Any:
            raise RuntimeError("422")

        assert timeline.timed_write(("ns", "a"), lambda obj: {"echo": obj})({"x": 1}) == {"echo": {"x": 1}}
        with pytest.raises(RuntimeError):
            timeline.timed_write(("ns", "b"), refused)({})
    finally:
        timeline.configure(None)
    lines = _lines(path)
    assert [line[:3] for line in lines] == [
        ["ns", "a", "sent"],
        ["ns", "a", "returned"],
        ["ns", "b", "sent"],
        ["ns", "b", "returned"],  # stamped when the request fails too
    ]
    times = [line[3] for line in lines]
    assert times == sorted(times)


def test_a_new_spec_is_stamped_at_each_stage_by_the_operator(timeline_file: Path) -> None:
    """Through the operator's own handler, queue and apply path: a GLMDeployment seen for the first
    time gets handler, take, sent and returned, in that order; its planned echo gets no handler
    stamp."""

    async def scenario() -> None:
        api = SlowServiceApi(slow_kind="none")
        op = Operator(OperatorConfig(leader_election=False, workers=2), api=api)  # type: ignore[arg-type]
        op.cache.replace_nodes(NODES)

        async def gate() -> None:
            return None

        worker = asyncio.create_task(op.queue.run_worker(op.reconcile_key, gate))
        op.on_glmdeployment("ADDED", copy.deepcopy(BODY))
        for _ in range(100):
            if api.status_writes and not op.queue.tails_in_flight:
                break
            await asyncio.sleep(0.05)
        assert api.status_writes == 1 and "Deployment" in api.applied
        worker.cancel()
        op.planning_pool.shutdown()

    asyncio.run(scenario())
    stages = [stage for ns, name, stage, _ in _lines(timeline_file) if (ns, name) == ("llm", "g")]
    assert stages[:4] == ["handler", "take", "sent", "returned"], stages
    assert stages.count("handler") == 1


def test_the_bench_lines_the_operators_stamps_up_with_its_own_marks(tmp_path: Path) -> None:
    path = tmp_path / "timeline.jsonl"
    rows = [
        ["b", "g-1", "handler", 10.25],
        ["b", "g-1", "take", 10.5],
        ["b", "g-1", "take", 99.0],  # a later reconcile: the first take counts
        ["b", "g-1", "sent", 10.75],
        ["b", "g-1", "returned", 11.5],
        ["b", "g-2", "take", 5.0],  # an older object of the same name, before its handler
        ["b", "g-2", "handler", 20.0],
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "not json\n")
    marks = {"b/g-1": (9.5, 10.0, 12.0), "b/g-2": (19.0, 19.5, None), "b/g-3": (1.0, None, None)}
    stages = dict(controller_bench().timeline_stages(path, marks))
    assert stages == {
        "bench seen -> operator handler": [0.25, 0.5],
        "handler -> worker takes it": [0.25],
        "worker -> Deployment POST sent": [0.25],
        "POST round trip (operator)": [0.75],
        "POST returned -> bench sees child": [0.5],
    }
