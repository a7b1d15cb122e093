"""The knee of a recorded load test, and whether a record still describes the plan (pure).

Whole sweeps in, the concurrency per replica the autoscaler aims at (or why none) out.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from glm_operator.planning.speed.measured import (
    DATA_KEY,
    Measurement,
    MeasurementFormatError,
    RecordedShape,
    measured_knee,
    measurement_from_data,
    measurement_to_data,
    shape_differences,
    workload_mismatch,
)
from tests.harness.load_levels import SATURATING, level

# A replica that still gains throughput at 32 while its ITL climbs steadily.
CLIMBING = (
    level(1, 100, 10, 40),
    level(2, 190, 10.5, 42),
    level(4, 360, 11, 45),
    level(8, 640, 16, 60),
    level(16, 1100, 32, 90),
    level(32, 1800, 48, 160),
)


def test_without_slo_the_knee_is_where_throughput_stops_rising() -> None:
    knee = measured_knee(SATURATING, replicas=1, max_concurrency=256)
    assert knee.concurrency == 8
    assert knee.reason.startswith("the measured knee: from concurrency 8 to 16")


def test_the_slo_limit_is_interpolated_between_the_last_level_that_meets_it_and_the_first_that_misses() -> (
    None
):
    # ITL 16 ms at 8, 32 ms at 16: 20 ms is reached a quarter of the way, at 10
    knee = measured_knee(CLIMBING, replicas=1, max_concurrency=256, itl_ms=20)
    assert knee.concurrency == 10
    assert "spec.slo (ITL p50 <= 20 ms) holds up to concurrency 10.0" in knee.reason
    # TTFT: 60 ms at 8, 90 ms at 16: 75 ms at 12; with both targets the tighter one wins
    assert measured_knee(CLIMBING, 1, 256, ttft_ms=75).concurrency == 12
    assert measured_knee(CLIMBING, 1, 256, itl_ms=20, ttft_ms=75).concurrency == 10
    # a target every level meets leaves the throughput knee (here none) and max-num-seqs
    assert measured_knee(CLIMBING, 1, 32, itl_ms=100).concurrency == 32


def test_the_lowest_bound_wins_and_max_num_seqs_caps_it() -> None:
    # spec.slo allows 20 (ITL 16 ms at 16, 32 ms at 32) but throughput stops rising at 8
    slow_itl = measured_knee(SATURATING, 1, 256, itl_ms=20)
    assert slow_itl.concurrency == 8 and slow_itl.reason.startswith("the measured knee")
    # max-num-seqs 4 below the knee
    capped = measured_knee(SATURATING, 1, 4)
    assert capped.concurrency == 4 and capped.reason == "max-num-seqs 4, reached by the sweep"


def test_no_level_that_meets_the_slo_gives_no_knee() -> None:
    knee = measured_knee(CLIMBING, 1, 256, itl_ms=5)
    assert knee.concurrency is None
    assert knee.reason.startswith(
        "no measured level meets spec.slo (ITL p50 <= 5 ms): at concurrency 1 ITL p50 10.0"
    )


def test_a_sweep_that_stops_short_gives_no_knee_and_says_how_far_to_go() -> None:
    knee = measured_knee(CLIMBING[:4], 1, 64)
    assert knee.concurrency is None
    assert "stopped at concurrency 8, below max-num-seqs 64" in knee.reason
    assert "record one that reaches 64" in knee.reason


def test_levels_are_divided_by_the_replicas_behind_the_url() -> None:
    # two replicas behind a Service: the whole URL saturates at 16, each replica at 8
    doubled = tuple(dataclasses.replace(lv, concurrency=lv.concurrency * 2) for lv in SATURATING)
    knee = measured_knee(doubled, replicas=2, max_concurrency=256)
    assert knee.concurrency == 8 and "2 replicas behind the URL" in knee.reason
    assert measured_knee(doubled, replicas=2, max_concurrency=4).concurrency == 4


def test_levels_with_errors_are_left_out() -> None:
    with_errors = (*SATURATING[:4], level(16, 900, 30, errors=3), SATURATING[5])
    assert measured_knee(with_errors, 1, 256).concurrency == 8
    every = tuple(dataclasses.replace(lv, errors=1) for lv in SATURATING)
    knee = measured_knee(every, 1, 256)
    assert knee.concurrency is None and "without errors" in knee.reason


SHAPE = RecordedShape(
    gpu_product="L4",
    checkpoint="zai-org/glm-4-9b-chat",
    quantization="bf16",
    kv_cache_dtype="auto",
    tensor_parallel_size=1,
    image="vllm/vllm-openai:v0.33.0",
)
RECORD = Measurement(
    levels=SATURATING,
    input_tokens=512,
    output_tokens=128,
    shape=SHAPE,
    recorded_at="2026-12-07T00:00:00Z",
    replicas=1,
    max_num_seqs=64,
    url="http://127.0.0.1:8000",
    model="glm",
)


def test_a_record_reads_back_as_written() -> None:
    data = measurement_to_data(RECORD)
    assert set(data) == {DATA_KEY}
    assert measurement_from_data(data) == RECORD
    doc = json.loads(data[DATA_KEY])
    assert doc["levels"][0]["output_tokens_per_s"] == 125 and doc["shape"]["gpu_product"] == "L4"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (None, "no measurement.json key"),
        ({DATA_KEY: "not json"}, "is not a load-test record (JSONDecodeError"),
        ({DATA_KEY: json.dumps({"version": 7})}, "format version 7"),
        ({DATA_KEY: json.dumps({"version": 1, "shape": {}})}, "is not a load-test record"),
    ],
)
def test_a_bad_record_is_a_clear_error(data: dict[str, str] | None, message: str) -> None:
    with pytest.raises(MeasurementFormatError, match=message.replace("(", r"\(")):
        measurement_from_data(data)


def test_shape_and_workload_checks_name_each_difference() -> None:
    assert shape_differences(SHAPE, SHAPE) == []
    moved = dataclasses.replace(SHAPE, tensor_parallel_size=2, image="vllm/vllm-openai:v0.34.0")
    assert shape_differences(SHAPE, moved) == [
        "tensor_parallel_size 1 -> 2",
        "image 'vllm/vllm-openai:v0.33.0' -> 'vllm/vllm-openai:v0.34.0'",
    ]
    assert workload_mismatch(RECORD, 512, 128) == ""
    assert workload_mismatch(dataclasses.replace(RECORD, input_tokens=256, output_tokens=256), 512, 128) == ""
    assert workload_mismatch(dataclasses.replace(RECORD, output_tokens=16), 512, 128) == (
        "answers of 16 tokens (the plan's workload: 128; within x2)"
    )
