"""A recorded load test: its wire form, whether it still describes the plan, and its knee (pure).

``glm-operator loadtest --record NAMESPACE/NAME`` writes one :class:`Measurement` into a ConfigMap owned
by the GLMDeployment (``measurement_to_data``); the reconciler reads it back (``measurement_from_data``)
and, where it still describes what is served, aims the autoscaler at the measured knee instead of the
modelled one.

When a measurement is used:

1. **Shape.** It was taken against one variant of ``status.plan``: GPU type, model checkpoint,
   quantization, KV-cache dtype, TP, PP, DP, DCP, MTP draft tokens and the vLLM image
   (:class:`RecordedShape`). A variant of the current plan with every one of them equal may use it;
   any difference makes it stale (``shape_differences`` names each one). max-num-seqs is not part of
   the shape: it only caps the batch, and the knee is capped by the current one.
2. **Workload.** Its prompt and answer lengths are within a factor of ``WORKLOAD_FACTOR`` of the
   workload the plan predicts for (``performance.plan_workload``: 512 in, 128 out); a sweep of
   4-token answers says little about 128-token ones.
3. **Knee** (``measured_knee``). The levels without failed requests, their concurrency divided by the
   replicas the URL reached (one per pod behind it), give three bounds, and the knee is the lowest:

   * the load-test rule (:func:`glm_operator.planning.speed.knee.find_knee`): the level from which
     more concurrency buys ITL rather than output tokens/s;
   * with ``spec.slo``: the highest concurrency that still meets its ITL and TTFT p50 targets,
     linearly interpolated between the last level that meets them (walking up from the lowest) and
     the first that does not, rounded down;
   * max-num-seqs (x DP ranks): a replica never runs more.

   The measurement is not used when no level meets ``spec.slo``, or when none of the three bounds
   lies within the measured levels (the sweep stopped below max-num-seqs before any knee): the
   reason says which, and what to measure.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from glm_operator.planning.speed.knee import LevelResult, find_knee

#: The ConfigMap key that holds the measurement (JSON).
DATA_KEY = "measurement.json"
FORMAT_VERSION = 1
#: A recorded prompt or answer length more than this factor away from the plan's workload is not used.
WORKLOAD_FACTOR = 2.0


@dataclass(frozen=True)
class RecordedShape:
    """The serving shape a load test ran against, as ``status.plan`` described it then."""

    gpu_product: str
    checkpoint: str  # the model id (and --quantization flag) served
    quantization: str
    kv_cache_dtype: str
    tensor_parallel_size: int
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    decode_context_parallel_size: int = 1
    speculative_tokens: int = 0
    image: str = ""

    def describe(self) -> str:
        text = f"{self.gpu_product} TP={self.tensor_parallel_size}"
        if self.pipeline_parallel_size > 1:
            text += f" PP={self.pipeline_parallel_size}"
        if self.data_parallel_size > 1:
            text += f" DP={self.data_parallel_size}"
        return f"{text} {self.quantization}"


def shape_from_status(variant: Mapping[str, Any], image: str) -> RecordedShape:
    """The shape of one ``status.plan.variants[]`` entry (its wire form) served with ``image``: what the
    recording stores and what the reconciler compares it with, read from the same form."""
    return RecordedShape(
        gpu_product=str(variant.get("gpuProduct", "")),
        checkpoint=str(variant.get("checkpoint", "")),
        quantization=str(variant.get("quantization", "")),
        kv_cache_dtype=str(variant.get("kvCacheDtype", "")),
        tensor_parallel_size=int(variant.get("tensorParallelSize", 1)),
        pipeline_parallel_size=int(variant.get("pipelineParallelSize", 1)),
        data_parallel_size=int(variant.get("dataParallelSize", 1)),
        decode_context_parallel_size=int(variant.get("decodeContextParallelSize", 1)),
        speculative_tokens=int(variant.get("speculativeTokens", 0)),
        image=image,
    )


@dataclass(frozen=True)
class Measurement:
    """One recorded sweep: levels as measured (the whole URL), and what they were measured against."""

    levels: tuple[LevelResult, ...]
    input_tokens: int
    output_tokens: int
    shape: RecordedShape
    recorded_at: str  # RFC 3339
    replicas: int = 1  # replicas the URL balanced over: a level's concurrency / this is per replica
    max_num_seqs: int = 0  # the variant's max-num-seqs when recorded (informative)
    url: str = ""
    model: str = ""


class MeasurementFormatError(ValueError):
    """The ConfigMap does not hold a measurement this release can read."""


def measurement_to_data(m: Measurement) -> dict[str, str]:
    """The ConfigMap ``data`` of a measurement: JSON, keys as ``loadtest -o json`` writes them."""
    doc = {
        "version": FORMAT_VERSION,
        "recorded_at": m.recorded_at,
        "url": m.url,
        "model": m.model,
        "input_tokens": m.input_tokens,
        "output_tokens": m.output_tokens,
        "replicas": m.replicas,
        "max_num_seqs": m.max_num_seqs,
        "shape": asdict(m.shape),
        "levels": [level.to_dict() for level in m.levels],
    }
    return {DATA_KEY: json.dumps(doc, indent=1, sort_keys=True)}


def measurement_from_data(data: Mapping[str, Any] | None) -> Measurement:
    """Read a ConfigMap's ``data`` back; ``MeasurementFormatError`` naming what is wrong."""
    text = (data or {}).get(DATA_KEY)
    if not isinstance(text, str):
        raise MeasurementFormatError(f"no {DATA_KEY} key")
    try:
        doc = json.loads(text)
        if doc.get("version") != FORMAT_VERSION:
            raise MeasurementFormatError(
                f"format version {doc.get('version')!r}, this operator reads {FORMAT_VERSION}"
            )
        names = {f.name for f in fields(RecordedShape)}
        shape = RecordedShape(**{k: v for k, v in dict(doc["shape"]).items() if k in names})
        return Measurement(
            levels=tuple(LevelResult.from_dict(level) for level in doc["levels"]),
            input_tokens=int(doc["input_tokens"]),
            output_tokens=int(doc["output_tokens"]),
            shape=shape,
            recorded_at=str(doc.get("recorded_at", "")),
            replicas=max(1, int(doc.get("replicas", 1))),
            max_num_seqs=int(doc.get("max_num_seqs", 0)),
            url=str(doc.get("url", "")),
            model=str(doc.get("model", "")),
        )
    except MeasurementFormatError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise MeasurementFormatError(
            f"{DATA_KEY} is not a load-test record ({type(exc).__name__}: {exc})"
        ) from None


def shape_differences(recorded: RecordedShape, current: RecordedShape) -> list[str]:
    """What differs between the shape a measurement was taken on and the one served now."""
    return [
        f"{f.name} {getattr(recorded, f.name)!r} -> {getattr(current, f.name)!r}"
        for f in fields(RecordedShape)
        if getattr(recorded, f.name) != getattr(current, f.name)
    ]


def workload_mismatch(m: Measurement, input_tokens: int, output_tokens: int) -> str:
    """Why the measured workload is too far from the plan's (``WORKLOAD_FACTOR``); empty when it is not."""
    problems = [
        f"{what} {got} tokens (the plan's workload: {want}; within x{WORKLOAD_FACTOR:g})"
        for what, got, want in (
            ("prompts of", m.input_tokens, input_tokens),
            ("answers of", m.output_tokens, output_tokens),
        )
        if not want / WORKLOAD_FACTOR <= got <= want * WORKLOAD_FACTOR
    ]
    return "; ".join(problems)


@dataclass(frozen=True)
class MeasuredKnee:
    """Running requests per replica to aim at, from a measurement; None (with why) when it gives none."""

    concurrency: int | None
    reason: str


def _meets(level: LevelResult, itl_ms: float | None, ttft_ms: float | None) -> bool:
    itl_ok = itl_ms is None or level.itl_p50_s * 1000 <= itl_ms
    return itl_ok and (ttft_ms is None or level.ttft_p50_s * 1000 <= ttft_ms)


def _crossing(low: LevelResult, high: LevelResult, itl_ms: float | None, ttft_ms: float | None) -> float:
    """Where, between ``low`` (meets the targets) and ``high`` (misses one), the latency reaches its target,
    linearly; the lowest over the targets ``high`` misses."""
    crossings = []
    for target, a, b in (
        (itl_ms, low.itl_p50_s * 1000, high.itl_p50_s * 1000),
        (ttft_ms, low.ttft_p50_s * 1000, high.ttft_p50_s * 1000),
    ):
        if target is not None and b > target:
            share = (target - a) / (b - a) if b > a else 0.0
            crossings.append(low.concurrency + share * (high.concurrency - low.concurrency))
    return min(crossings, default=float(low.concurrency))


def _slo_text(itl_ms: float | None, ttft_ms: float | None) -> str:
    targets = []
    if itl_ms is not None:
        targets.append(f"ITL p50 <= {itl_ms:g} ms")
    if ttft_ms is not None:
        targets.append(f"TTFT p50 <= {ttft_ms:g} ms")
    return "spec.slo (" + ", ".join(targets) + ")"


def _latency_text(level: LevelResult) -> str:
    return f"ITL p50 {level.itl_p50_s * 1000:.1f} ms, TTFT p50 {level.ttft_p50_s * 1000:.1f} ms"


def measured_knee(
    levels: Sequence[LevelResult],
    replicas: int,
    max_concurrency: int,
    itl_ms: float | None = None,
    ttft_ms: float | None = None,
) -> MeasuredKnee:
    """The knee of a recorded sweep, per replica (module docstring, step 3). ``max_concurrency``: the
    running requests one replica can hold (max-num-seqs x DP ranks). The bounds are found on the levels
    as measured (the whole URL) and divided by ``replicas`` at the end."""
    n = max(1, replicas)
    usable = sorted(
        (
            lv
            for lv in levels
            if not lv.errors
            and lv.requests
            and not math.isnan(lv.itl_p50_s)
            and not math.isnan(lv.ttft_p50_s)
        ),
        key=lambda lv: lv.concurrency,
    )
    if not usable:
        return MeasuredKnee(None, "no level of the recorded sweep completed without errors")
    per = "" if n == 1 else f" ({n} replicas behind the URL: concurrency / {n} per replica)"
    bounds: list[tuple[float, str]] = []
    if len(usable) >= 2:
        knee = find_knee(usable)
        if knee.concurrency is not None:
            bounds.append((knee.concurrency / n, f"the measured knee: {knee.reason}"))
    if itl_ms is not None or ttft_ms is not None:
        slo = _slo_text(itl_ms, ttft_ms)
        if not _meets(usable[0], itl_ms, ttft_ms):
            return MeasuredKnee(
                None,
                f"no measured level meets {slo}: at concurrency {usable[0].concurrency} "
                + _latency_text(usable[0]),
            )
        for low, high in itertools.pairwise(usable):
            if not _meets(high, itl_ms, ttft_ms):
                at = _crossing(low, high, itl_ms, ttft_ms)
                bounds.append(
                    (
                        at / n,
                        f"{slo} holds up to concurrency {at:.1f} (interpolated between {low.concurrency}: "
                        f"{_latency_text(low)} and {high.concurrency}: {_latency_text(high)})",
                    )
                )
                break
    cap = max(1, max_concurrency)
    top = usable[-1].concurrency / n
    if top >= cap:
        bounds.append((float(cap), f"max-num-seqs {cap}, reached by the sweep"))
    if not bounds:
        slo_limit = " or the spec.slo limit" if itl_ms is not None or ttft_ms is not None else ""
        return MeasuredKnee(
            None,
            f"the sweep stopped at concurrency {usable[-1].concurrency}, below max-num-seqs {cap} per "
            "replica, "
            f"before the throughput knee{slo_limit}: record one that reaches {cap * n} (--concurrency){per}",
        )
    at, why = min(bounds, key=lambda b: b[0])
    return MeasuredKnee(max(1, min(cap, math.floor(at))), why + per)
