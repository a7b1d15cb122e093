"""A tiny stand-in for vLLM's HTTP server, for tests (stdlib only, loopback only).

Serves ``GET /metrics`` in the Prometheus text format with the two gauges the autoscaler reads,
``vllm:num_requests_waiting`` and ``vllm:num_requests_running`` (labels ``model_name`` and
``engine``, as vLLM v1 writes them), and ``POST /admin/set`` with a JSON body
``{"model": "glm-4.5-air", "waiting": 12, "running": 16}`` to change them (either value may be
left out; an unknown model is added). ``GET /health`` answers 200. The gauges only change through
``set``/``/admin/set``: serving requests does not move them. Besides, per model, the series the
chart's dashboards and alerts read (``VLLM_SERIES``, checked against vLLM's own in the contract
test): ``vllm:kv_cache_usage_perc`` and ``vllm:num_preemptions_total`` (set through ``set``), and
the prompt and generation token counters and the time-to-first-token and inter-token latency
histograms, which each served request moves by its latency model's figures. And, once per
emulator (one engine, as one vLLM server), ``vllm:cache_config_info``: value 1, vLLM 0.33's label
names (``CacheConfig.metrics_info()``, a subset of them) with the KV-cache size in ``num_gpu_blocks``,
``block_size`` and ``kv_cache_size_tokens`` (``set_cache_config``, or the same keys in
``/admin/set``; ``None`` renders ``"None"`` as vLLM does for an unset field), and no ``model_name``.

It also answers the OpenAI routes a gateway forwards, with a latency model so queues form:
``POST /v1/chat/completions`` and ``/v1/completions`` (``"stream": true`` gives server-sent
events), ``GET /v1/models``. One request takes ``LatencyModel.service_seconds(prompt tokens,
max_tokens)`` once it holds one of ``max_concurrency`` slots (more requests wait, as in vLLM's
queue); a prompt is ``len(text) // 4`` tokens, or its length when it is a list of token ids. With
``LatencyModel.batch_knee`` the decode slows down as a batch grows past it, like a GPU's decode
step once it stops being bound by reading the weights: each output token takes
``seconds_per_output_token * max(1, running / batch_knee) ** past_knee_power``, so output tokens/s
stop rising (power 1) or fall (power 2) at
``batch_knee`` requests in flight while the inter-token latency climbs (the knee a load test looks
for). A streamed ``/v1/completions`` answer sends ``choices[0].text`` (chat: ``delta.content``),
one chunk per token up to ``MAX_STREAM_CHUNKS``, and with ``stream_options.include_usage`` a last
chunk with ``usage``. Every answer carries ``X-Served-By: <name>``.
``GET /admin/stats`` returns counters (requests, most in flight, and the prefix cache's queried
and hit prompt tokens).

A prefix cache, as vLLM's automatic prefix caching: the prompt (a chat's messages laid out as
GLM's chat template does, ``[gMASK]<sop><|role|>\ncontent...<|assistant|>``; a completion's text, or
its token ids) is cut into blocks of ``CacheConfig.block_size`` tokens (four characters a token),
each block named by a hash of it and every block before it. A request's leading blocks found in
the cache are not prefilled again: its prefill takes ``seconds_per_prompt_token`` for the other
tokens only (each cached block saves ``block_size`` of them), and its answer's
``usage.prompt_tokens_details.cached_tokens`` says how many, as vLLM's does. Then all its whole
blocks are in the cache, which holds ``num_gpu_blocks`` blocks and evicts the least recently used.
As in vLLM, the last prompt token is always computed, so a prompt never hits whole.

In-process::

    with VLLMMetricsEmulator({"glm-4.5-air": (0, 0)}) as emulator:
        emulator.set("glm-4.5-air", waiting=12)
        ...  # scrape emulator.url + "/metrics"

As a process (prints the port on stdout, exits after --max-seconds)::

    python -m tests.harness.vllm_emulator --model glm-4.5-air --max-seconds 600 \
        --host 127.0.0.2 --max-concurrency 4 --seconds-per-output-token 0.002
"""

from __future__ import annotations

import argparse
import hashlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "VLLM_SERIES",
    "CacheConfig",
    "EngineStats",
    "LatencyHistogram",
    "LatencyModel",
    "PrefixCache",
    "VLLMMetricsEmulator",
    "main",
    "render_metrics",
]

#: Most SSE chunks one streamed answer is split into (tokens are grouped beyond that).
MAX_STREAM_CHUNKS = 64


@dataclass(frozen=True)
class LatencyModel:
    """Service time of one request once it runs: prefill per prompt token, decode per output token."""

    base_seconds: float = 0.0
    seconds_per_prompt_token: float = 0.0
    seconds_per_output_token: float = 0.0
    batch_knee: int = 0  # requests in flight beyond which each decode step slows down (0: never)
    # 1: a token takes ``running / batch_knee`` times longer past the knee (tokens/s flat). 2: the
    # square of that (tokens/s fall), which a knee test needs on a busy machine: a stall of one level
    # then has to halve its tokens/s, not move them 10 %, to hide the knee.
    past_knee_power: float = 1.0

    def decode_factor(self, running: int) -> float:
        """How much slower one output token is with ``running`` requests in flight."""
        if self.batch_knee <= 0:
            return 1.0
        return max(1.0, float((running / self.batch_knee) ** self.past_knee_power))

    def prefill_seconds(self, prompt_tokens: int) -> float:
        return self.base_seconds + prompt_tokens * self.seconds_per_prompt_token

    def service_seconds(self, prompt_tokens: int, output_tokens: int) -> float:
        return self.prefill_seconds(prompt_tokens) + output_tokens * self.seconds_per_output_token


def _openai_error(message: str, error_type: str, code: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return ""


def _prompt_text(body: Mapping[str, Any]) -> str:
    """The prompt of a completion request: a chat's messages in GLM's chat-template layout."""
    messages = body.get("messages")
    if isinstance(messages, list) and messages:
        turns = "".join(
            f"<|{m.get('role', 'user')}|>\n{_content_text(m.get('content'))}"
            for m in messages
            if isinstance(m, Mapping)
        )
        return f"[gMASK]<sop>{turns}<|assistant|>"
    prompt = body.get("prompt")
    return prompt if isinstance(prompt, str) else json.dumps(prompt)


def prompt_blocks(body: Mapping[str, Any], text: str, block_size: int) -> list[str]:
    """Hashes of the prompt's whole blocks of ``block_size`` tokens, each over every block up to it,
    but the block of the last token (always computed)."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        pieces = [",".join(map(str, prompt[i : i + block_size])) for i in range(0, len(prompt), block_size)]
        tokens = len(prompt)
    else:
        width = block_size * 4
        pieces = [text[i : i + width] for i in range(0, len(text), width)]
        tokens = len(text) // 4
    digest = hashlib.sha256()
    blocks = []
    for piece in pieces[: max(0, tokens - 1) // block_size]:
        digest.update(piece.encode())
        blocks.append(digest.copy().hexdigest())
    return blocks


class PrefixCache:
    """Block hashes in least-recently-used order, at most ``capacity`` of them."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._blocks: OrderedDict[str, None] = OrderedDict()

    def lookup_and_insert(self, blocks: list[str]) -> int:
        """How many leading ``blocks`` were cached; then all of them are (most recent)."""
        hits = 0
        for block in blocks:
            if block not in self._blocks:
                break
            hits += 1
        for block in blocks:
            self._blocks[block] = None
            self._blocks.move_to_end(block)
        while len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)
        return hits

    def clear(self) -> None:
        self._blocks.clear()


def _prompt_tokens(body: Mapping[str, Any], text: str) -> int:
    """Token ids are counted as they are; text as four characters a token."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        return len(prompt)
    return len(text) // 4


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


#: Upper bounds of the emulated latency histograms (seconds; a subset of vLLM's).
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

#: Every series the emulator exposes, as the names of their samples (what Prometheus stores).
VLLM_SERIES = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:num_preemptions_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:time_to_first_token_seconds_bucket",
    "vllm:time_to_first_token_seconds_sum",
    "vllm:time_to_first_token_seconds_count",
    "vllm:inter_token_latency_seconds_bucket",
    "vllm:inter_token_latency_seconds_sum",
    "vllm:inter_token_latency_seconds_count",
    "vllm:cache_config_info",
)


@dataclass
class CacheConfig:
    """The KV-cache fields of vLLM's ``vllm:cache_config_info`` (one engine); a few fixed others."""

    num_gpu_blocks: int | None = 2048
    block_size: int | None = 16
    kv_cache_size_tokens: int | None = 32768

    def labels(self) -> dict[str, str]:
        return {
            "block_size": str(self.block_size),
            "cache_dtype": "auto",
            "enable_prefix_caching": "True",
            "gpu_memory_utilization": "0.92",
            "kv_cache_size_tokens": str(self.kv_cache_size_tokens),
            "num_cpu_blocks": "None",
            "num_gpu_blocks": str(self.num_gpu_blocks),
            "engine": "0",
        }


@dataclass
class LatencyHistogram:
    """Cumulative counts per bound of ``LATENCY_BUCKETS`` (then +Inf), as Prometheus exposes them."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    total: float = 0.0

    def observe(self, seconds: float) -> None:
        for index, bound in enumerate(LATENCY_BUCKETS):
            if seconds <= bound:
                self.counts[index] += 1
        self.counts[-1] += 1
        self.total += seconds

    def exposition(self, metric: str, labels: str) -> list[str]:
        bounds = [repr(bound) for bound in LATENCY_BUCKETS] + ["+Inf"]
        lines = [
            f'{metric}_bucket{{{labels},le="{b}"}} {float(n)!r}'
            for b, n in zip(bounds, self.counts, strict=True)
        ]
        return [
            *lines,
            f"{metric}_sum{{{labels}}} {self.total!r}",
            f"{metric}_count{{{labels}}} {float(self.counts[-1])!r}",
        ]


@dataclass
class EngineStats:
    """What one model's engine reports besides the queue gauges."""

    kv_cache_usage: float = 0.0
    preemptions: float = 0.0
    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    ttft: LatencyHistogram = field(default_factory=LatencyHistogram)
    itl: LatencyHistogram = field(default_factory=LatencyHistogram)


def render_metrics(
    gauges: Mapping[str, tuple[float, float]],
    engines: Mapping[str, EngineStats] | None = None,
    cache_config: CacheConfig | None = None,
) -> str:
    """Prometheus text exposition of ``{model: (waiting, running)}``, each model's ``EngineStats``
    and the engine's ``CacheConfig``."""
    info = ",".join(f'{k}="{_escape(v)}"' for k, v in (cache_config or CacheConfig()).labels().items())
    lines = [
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
        "# TYPE vllm:cache_config_info gauge",
        f"vllm:cache_config_info{{{info}}} 1.0",
    ]
    for metric, index, help_text in (
        ("vllm:num_requests_running", 1, "Number of requests in model execution batches."),
        ("vllm:num_requests_waiting", 0, "Number of requests waiting to be processed."),
    ):
        lines.append(f"# HELP {metric} {help_text}")
        lines.append(f"# TYPE {metric} gauge")
        for model, values in sorted(gauges.items()):
            lines.append(f'{metric}{{engine="0",model_name="{_escape(model)}"}} {float(values[index])!r}')
    stats = {model: (engines or {}).get(model) or EngineStats() for model in sorted(gauges)}
    for metric, kind, attribute, help_text in (
        ("vllm:kv_cache_usage_perc", "gauge", "kv_cache_usage", "KV-cache usage. 1 means 100 percent usage."),
        (
            "vllm:num_preemptions",
            "counter",
            "preemptions",
            "Cumulative number of preemption from the engine.",
        ),
        ("vllm:prompt_tokens", "counter", "prompt_tokens", "Number of prefill tokens processed."),
        ("vllm:generation_tokens", "counter", "generation_tokens", "Number of generation tokens processed."),
    ):
        lines.append(f"# HELP {metric} {help_text}")
        lines.append(f"# TYPE {metric} {kind}")
        suffix = "_total" if kind == "counter" else ""
        for model, engine in stats.items():
            value = float(getattr(engine, attribute))
            lines.append(f'{metric}{suffix}{{engine="0",model_name="{_escape(model)}"}} {value!r}')
    for metric, attribute, help_text in (
        ("vllm:time_to_first_token_seconds", "ttft", "Histogram of time to first token in seconds."),
        ("vllm:inter_token_latency_seconds", "itl", "Histogram of inter-token latency in seconds."),
    ):
        lines.append(f"# HELP {metric} {help_text}")
        lines.append(f"# TYPE {metric} histogram")
        for model, engine in stats.items():
            lines += getattr(engine, attribute).exposition(
                metric, f'engine="0",model_name="{_escape(model)}"'
            )
    return "\n".join(lines) + "\n"


class _QuietServer(ThreadingHTTPServer):
    """Clients that hang up early (health checks, a proxy giving up) are not errors worth a traceback.

    A listen backlog like a real server's (socketserver's default of 5 drops connections under a
    burst, and the client's SYN retry adds a whole second).
    """

    request_queue_size = 1024

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


class VLLMMetricsEmulator:
    """Serves fake vLLM queue gauges and OpenAI routes on ``host`` (127.0.0.1, a free port by default)."""

    def __init__(
        self,
        models: Mapping[str, tuple[float, float]] | None = None,
        port: int = 0,
        *,
        host: str = "127.0.0.1",
        name: str | None = None,
        latency: LatencyModel | None = None,
        max_concurrency: int | None = None,
        tokenizer: bool = True,
    ) -> None:
        if not host.startswith("127.") and host != "::1":
            raise ValueError(f"the emulator binds to loopback only, not {host}")
        self._lock = threading.Lock()
        self._gauges: dict[str, tuple[float, float]] = dict(models or {})
        self._engines: dict[str, EngineStats] = {}
        self._cache_config = CacheConfig()
        self.latency = latency or LatencyModel()
        # tokenizer=False: like vLLM with --skip-tokenizer-init, streamed completions carry empty text
        # (and their token ids when the request asks for return_token_ids)
        self.tokenizer = tokenizer
        self._slots = threading.BoundedSemaphore(max_concurrency) if max_concurrency else None
        self._stats: dict[str, int] = {
            "requests": 0,
            "in_flight": 0,
            "max_in_flight": 0,
            "prefix_cache_queries": 0,  # prompt tokens
            "prefix_cache_hits": 0,  # of them, found in the prefix cache
        }
        self._prefix_cache = PrefixCache(self._cache_config.num_gpu_blocks or 0)
        self._server = _QuietServer((host, port), self._handler_class())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None
        self.name = name or f"{host}:{self.port}"

    @property
    def host(self) -> str:
        return str(self._server.server_address[0])

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stats(self) -> dict[str, int]:
        """Counters since start: requests, in_flight, max_in_flight, prefix_cache_queries and
        prefix_cache_hits (prompt tokens, as vLLM's counters of the same names)."""
        with self._lock:
            return dict(self._stats)

    def _begin(self, body: Mapping[str, Any], text: str, prompt_tokens: int) -> int:
        """Count a request in; the prompt tokens its prefix cache holds."""
        with self._lock:
            self._stats["requests"] += 1
            self._stats["in_flight"] += 1
            self._stats["max_in_flight"] = max(self._stats["max_in_flight"], self._stats["in_flight"])
            block_size = self._cache_config.block_size or 16
            hits = self._prefix_cache.lookup_and_insert(prompt_blocks(body, text, block_size))
            cached = min(hits * block_size, max(0, prompt_tokens - 1))
            self._stats["prefix_cache_queries"] += prompt_tokens
            self._stats["prefix_cache_hits"] += cached
            return cached

    def forget_prefixes(self) -> None:
        """Empty the emulated prefix cache."""
        with self._lock:
            self._prefix_cache.clear()

    def running(self) -> int:
        with self._lock:
            return self._stats["in_flight"]

    def _end(self) -> None:
        with self._lock:
            self._stats["in_flight"] -= 1

    def set(
        self,
        model: str,
        *,
        waiting: float | None = None,
        running: float | None = None,
        kv_cache_usage: float | None = None,
        preemptions: float | None = None,
    ) -> None:
        with self._lock:
            old_waiting, old_running = self._gauges.get(model, (0.0, 0.0))
            self._gauges[model] = (
                old_waiting if waiting is None else float(waiting),
                old_running if running is None else float(running),
            )
            engine = self._engines.setdefault(model, EngineStats())
            if kv_cache_usage is not None:
                engine.kv_cache_usage = float(kv_cache_usage)
            if preemptions is not None:
                engine.preemptions = float(preemptions)

    def set_cache_config(
        self,
        *,
        num_gpu_blocks: int | None = None,
        block_size: int | None = None,
        kv_cache_size_tokens: int | None = None,
    ) -> None:
        """The KV-cache size ``vllm:cache_config_info`` reports (fields left out: rendered "None")."""
        with self._lock:
            self._cache_config = CacheConfig(num_gpu_blocks, block_size, kv_cache_size_tokens)
            self._prefix_cache = PrefixCache(num_gpu_blocks or 0)

    def _served(self, model: str, prompt_tokens: int, output_tokens: int, cached: int = 0) -> None:
        """Count one served request in its model's token counters and latency histograms."""
        with self._lock:
            engine = self._engines.setdefault(model, EngineStats())
            engine.prompt_tokens += prompt_tokens
            engine.generation_tokens += output_tokens
            engine.ttft.observe(self.latency.prefill_seconds(prompt_tokens - cached))
            engine.itl.observe(self.latency.seconds_per_output_token)

    def snapshot(self) -> dict[str, tuple[float, float]]:
        with self._lock:
            return dict(self._gauges)

    def metrics_text(self) -> str:
        with self._lock:
            return render_metrics(self._gauges, self._engines, self._cache_config)

    def start(self) -> VLLMMetricsEmulator:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="vllm-emulator",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> VLLMMetricsEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        emulator = self

        class Handler(BaseHTTPRequestHandler):
            disable_nagle_algorithm = True  # headers and body are two writes; do not hold the second

            def do_GET(self) -> None:
                if self.path.split("?")[0] == "/metrics":
                    self._reply(200, emulator.metrics_text(), "text/plain; version=0.0.4")
                elif self.path == "/health":
                    self._reply(200, "", "text/plain")
                elif self.path == "/v1/models":
                    models = [
                        {"id": model, "object": "model", "owned_by": "vllm"} for model in emulator.snapshot()
                    ]
                    self._reply(200, json.dumps({"object": "list", "data": models}), "application/json")
                elif self.path == "/admin/stats":
                    self._reply(200, json.dumps(emulator.stats()), "application/json")
                else:
                    self._reply(404, "not found\n", "text/plain")

            def do_POST(self) -> None:
                if self.path in ("/v1/chat/completions", "/v1/completions"):
                    self._complete()
                    return
                if self.path != "/admin/set":
                    self._reply(404, "not found\n", "text/plain")
                    return
                try:
                    length = int(self.headers.get("Content-Length", "0"))
                    body: Any = json.loads(self.rfile.read(length) or b"{}")
                    model = str(body["model"])
                    waiting = body.get("waiting")
                    running = body.get("running")
                    emulator.set(
                        model,
                        waiting=None if waiting is None else float(waiting),
                        running=None if running is None else float(running),
                    )
                    fields = ("num_gpu_blocks", "block_size", "kv_cache_size_tokens")
                    if any(f in body for f in fields):
                        emulator.set_cache_config(
                            **{f: int(body[f]) for f in fields if body.get(f) is not None}
                        )
                except (KeyError, TypeError, ValueError, AttributeError) as err:
                    self._reply(400, f"bad request: {err}\n", "text/plain")
                    return
                self._reply(200, json.dumps({"ok": True}) + "\n", "application/json")

            def _complete(self) -> None:
                try:
                    length = int(self.headers.get("Content-Length", "0"))
                    body: Any = json.loads(self.rfile.read(length) or b"{}")
                    model = str(body["model"])
                    output_tokens = int(body.get("max_tokens") or 16)
                except (KeyError, TypeError, ValueError, AttributeError) as err:
                    error = _openai_error(f"bad request: {err}", "BadRequestError", "bad_request")
                    self._reply(400, json.dumps(error), "application/json")
                    return
                if model not in emulator.snapshot():
                    error = _openai_error(
                        f"The model `{model}` does not exist.", "NotFoundError", "model_not_found"
                    )
                    self._reply(404, json.dumps(error), "application/json")
                    return
                text = _prompt_text(body)
                prompt_tokens = _prompt_tokens(body, text)
                if emulator._slots is not None:
                    emulator._slots.acquire()
                cached = emulator._begin(body, text, prompt_tokens)
                emulator._served(model, prompt_tokens, output_tokens, cached)
                counts = {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": output_tokens,
                    "prompt_tokens_details": {"cached_tokens": cached},
                }
                try:
                    if body.get("stream"):
                        options = body.get("stream_options")
                        usage = isinstance(options, Mapping) and bool(options.get("include_usage"))
                        token_ids = bool(body.get("return_token_ids"))
                        self._stream(model, prompt_tokens - cached, output_tokens, counts, usage, token_ids)
                    else:
                        factor = emulator.latency.decode_factor(emulator.running())
                        time.sleep(
                            emulator.latency.prefill_seconds(prompt_tokens - cached)
                            + output_tokens * emulator.latency.seconds_per_output_token * factor
                        )
                        answer = {
                            "id": f"cmpl-{emulator.name}",
                            "object": "chat.completion",
                            "model": model,
                            "system_fingerprint": emulator.name,
                            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
                            "usage": counts,
                        }
                        self._reply(200, json.dumps(answer), "application/json")
                finally:
                    emulator._end()
                    if emulator._slots is not None:
                        emulator._slots.release()

            def _stream(
                self,
                model: str,
                prefill_tokens: int,
                output_tokens: int,
                counts: Mapping[str, Any],
                usage: bool,
                token_ids: bool,
            ) -> None:
                # No Content-Length: HTTP/1.0 ends the stream by closing the connection, as SSE does.
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("X-Served-By", emulator.name)
                self.end_headers()
                time.sleep(emulator.latency.prefill_seconds(prefill_tokens))
                chunks = max(1, min(output_tokens, MAX_STREAM_CHUNKS))
                pause = output_tokens * emulator.latency.seconds_per_output_token / chunks
                chat = self.path == "/v1/chat/completions"
                # Each chunk is due a pause after the one before; sleeping until that moment, not
                # for the pause, keeps a busy machine's oversleeping from adding up over the stream.
                due = time.monotonic()
                for index in range(chunks):
                    piece = f"t{index} " if emulator.tokenizer else ""
                    choice: dict[str, Any] = {"index": 0, "text": piece}
                    if token_ids:
                        choice["token_ids"] = [100 + index]
                    if chat:
                        choice = {"index": 0, "delta": {"content": piece}}
                    chunk = {"choices": [choice], "model": model}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                    if index + 1 < chunks:
                        due += pause * emulator.latency.decode_factor(emulator.running())
                        time.sleep(max(0.0, due - time.monotonic()))
                if usage:
                    last = {"choices": [], "model": model, "usage": counts}
                    self.wfile.write(f"data: {json.dumps(last)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

            def _reply(self, status: int, body: str, content_type: str) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("X-Served-By", emulator.name)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--model", action="append", default=[], help="served model name (repeatable)")
    parser.add_argument("--port", type=int, default=0, help="port (0 = any free port)")
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to bind (127.x.y.z)")
    parser.add_argument("--name", default=None, help="name in X-Served-By (default host:port)")
    parser.add_argument("--max-concurrency", type=int, default=None, help="requests served at once")
    parser.add_argument("--base-seconds", type=float, default=0.0, help="fixed time per request")
    parser.add_argument("--seconds-per-prompt-token", type=float, default=0.0)
    parser.add_argument("--seconds-per-output-token", type=float, default=0.0)
    parser.add_argument(
        "--batch-knee", type=int, default=0, help="requests in flight beyond which decoding slows down"
    )
    parser.add_argument(
        "--num-gpu-blocks", type=int, default=None, help="KV-cache blocks (the prefix cache's size)"
    )
    parser.add_argument("--max-seconds", type=float, default=3600.0, help="exit after this long")
    args = parser.parse_args(argv)
    emulator = VLLMMetricsEmulator(
        {model: (0.0, 0.0) for model in args.model},
        port=args.port,
        host=args.host,
        name=args.name,
        latency=LatencyModel(
            args.base_seconds, args.seconds_per_prompt_token, args.seconds_per_output_token, args.batch_knee
        ),
        max_concurrency=args.max_concurrency,
    )
    if args.num_gpu_blocks is not None:
        block_size = CacheConfig().block_size or 16
        emulator.set_cache_config(
            num_gpu_blocks=args.num_gpu_blocks,
            block_size=block_size,
            kv_cache_size_tokens=args.num_gpu_blocks * block_size,
        )
    with emulator:
        print(emulator.port, flush=True)
        deadline = time.monotonic() + args.max_seconds
        try:
            while time.monotonic() < deadline:
                time.sleep(min(1.0, max(deadline - time.monotonic(), 0.0)))
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
