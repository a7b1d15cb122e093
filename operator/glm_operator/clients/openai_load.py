"""The load test's I/O: streamed OpenAI requests at a sweep of concurrencies (asyncio, stdlib only).

``run_sweep(config)`` runs, for each concurrency *c*, a closed loop of *c* workers that each send
``warmup_requests_per_worker`` unrecorded and ``requests_per_worker`` recorded streamed requests, and
hands each level's recorded samples and steady window (:func:`run_level`) to the pure
:func:`glm_operator.planning.speed.knee.summarize_level`. Requests:

- ``/v1/completions`` (default): ``prompt`` is a list of ``input_tokens`` random token ids (below
  10,000, so within any model's vocabulary; random so that no prefix cache shortens the prefill),
  with ``ignore_eos: true`` and ``max_tokens: output_tokens`` so that every answer is exactly that
  long: vLLM needs no tokenizer for it, and with dummy weights the content does not matter;
- ``/v1/chat/completions``: a user message of ``input_tokens`` short random words (about one token
  each: the input length is approximate), same ``ignore_eos`` / ``max_tokens``.

``token_ids`` adds vLLM's ``return_token_ids: true``: a vLLM started without a tokenizer
(``--skip-tokenizer-init``, the GPU harness) streams chunks with empty text, and only their token ids
show that a token came. Both ask for ``stream: true`` with ``stream_options.include_usage``, so the
output token count is the server's; without a usage chunk it is the number of chunks that carried
text. HTTP/1.1 over ``asyncio.open_connection`` (TLS for ``https://``), one connection per request,
``Connection: close``; the answer is read as server-sent events from a chunked, sized or close-delimited body.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import ssl
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from glm_operator.planning.speed.knee import LevelResult, RequestSample, summarize_level

COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"
TOKEN_ID_LIMIT = 10_000  # token ids are drawn from [100, this)
_WORDS = ("alpha", "river", "stone", "green", "table", "cloud", "paper", "light", "north", "music")


@dataclass(frozen=True)
class LoadTestConfig:
    url: str  # base URL (``http://host:port``, a gateway path prefix allowed) or the endpoint itself
    model: str
    concurrencies: tuple[int, ...]
    input_tokens: int
    output_tokens: int
    chat: bool = False
    requests_per_worker: int = 4
    warmup_requests_per_worker: int = 1  # sent first at each level and not recorded
    api_key: str = ""
    timeout_s: float = 600.0
    seed: int = 0
    token_ids: bool = (
        False  # ask vLLM for each chunk's token ids (a server without a tokenizer sends no text)
    )


@dataclass(frozen=True)
class _Target:
    scheme: str
    host: str
    port: int
    path: str

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        return self.host if self.port == default else f"{self.host}:{self.port}"


def endpoint(url: str, chat: bool) -> _Target:
    """The host, port and path to POST to; raises ValueError for a URL that is not http(s)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"--url {url!r}: give http://host[:port][/prefix] or https://…")
    path = parts.path.rstrip("/")
    if not path.endswith((COMPLETIONS, CHAT)):
        path += CHAT if chat else COMPLETIONS
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return _Target(parts.scheme, parts.hostname, port, path)


def request_body(config: LoadTestConfig, index: int) -> dict[str, Any]:
    """The JSON body of request ``index`` (its random prompt is seeded by the index)."""
    rng = random.Random(config.seed * 1_000_003 + index)
    body: dict[str, Any] = {
        "model": config.model,
        "max_tokens": config.output_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if config.token_ids:
        body["return_token_ids"] = True
    if config.chat:
        words = " ".join(rng.choice(_WORDS) for _ in range(config.input_tokens))
        body["messages"] = [{"role": "user", "content": words}]
    else:
        body["prompt"] = [rng.randrange(100, TOKEN_ID_LIMIT) for _ in range(config.input_tokens)]
    return body


async def _body_chunks(reader: asyncio.StreamReader, headers: Mapping[str, str]) -> AsyncIterator[bytes]:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                return
            yield await reader.readexactly(size)
            await reader.readexactly(2)
    elif "content-length" in headers:
        yield await reader.readexactly(int(headers["content-length"]))
    else:
        while data := await reader.read(65536):
            yield data


def _tokens_in(event: Mapping[str, Any]) -> int:
    """How many output tokens a streamed chunk carries: its ``token_ids`` (vLLM with ``return_token_ids``;
    with speculative decoding a chunk carries every token a step accepted), else 1 for completion text, chat
    content or reasoning, 0 for none."""
    count = 0
    for choice in event.get("choices") or ():
        if not isinstance(choice, Mapping):
            continue
        delta = choice.get("delta")
        if not isinstance(delta, Mapping):
            delta = {}
        ids = choice.get("token_ids") or delta.get("token_ids")
        if isinstance(ids, list) and ids:
            count += len(ids)
        elif choice.get("text") or delta.get("content") or delta.get("reasoning_content"):
            count += 1
    return count


def _token_gaps(chunks: list[tuple[float, int]]) -> tuple[float, ...]:
    """Inter-token gaps from (arrival, tokens) chunks: a chunk of ``m`` tokens that came ``g`` after the one
    before is ``m`` gaps of ``g / m`` (so the ITL of a speculative step that emits several tokens is per
    token, as vLLM's TPOT counts it); the tokens of the first chunk open the stream."""
    gaps: list[float] = []
    for (before, _), (now, tokens) in itertools.pairwise(chunks):
        gaps += [(now - before) / tokens] * tokens
    return tuple(gaps)


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    status_line = (await reader.readline()).decode("latin-1").split()
    if len(status_line) < 2 or not status_line[1].isdigit():
        raise ConnectionError(f"not an HTTP answer: {' '.join(status_line)[:80]!r}")
    headers: dict[str, str] = {}
    while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line[1]), headers


async def _stream_once(target: _Target, body: Mapping[str, Any], api_key: str) -> RequestSample:
    payload = json.dumps(body).encode()
    head = [
        f"POST {target.path} HTTP/1.1",
        f"Host: {target.host_header}",
        "Content-Type: application/json",
        "Accept: text/event-stream",
        f"Content-Length: {len(payload)}",
        "Connection: close",
    ]
    if api_key:
        head.append(f"Authorization: Bearer {api_key}")
    context = ssl.create_default_context() if target.scheme == "https" else None
    start = time.perf_counter()
    reader, writer = await asyncio.open_connection(target.host, target.port, ssl=context)
    try:
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
        await writer.drain()
        status, headers = await _read_head(reader)
        if status != 200:
            text = b"".join([c async for c in _body_chunks(reader, headers)]).decode("utf-8", "replace")
            return RequestSample(None, (), 0, time.perf_counter() - start, f"HTTP {status}: {text[:200]}")
        chunks: list[tuple[float, int]] = []  # (arrival, tokens)
        usage: int | None = None
        buffer = b""
        async for data in _body_chunks(reader, headers):
            now = time.perf_counter()
            buffer += data.replace(b"\r\n", b"\n")
            *events, buffer = buffer.split(b"\n\n")
            for event in events:
                for line in event.split(b"\n"):
                    if not line.startswith(b"data:"):
                        continue
                    data_field = line[5:].strip()
                    if data_field == b"[DONE]":
                        continue
                    chunk = json.loads(data_field)
                    if isinstance(chunk.get("usage"), Mapping):
                        usage = int(chunk["usage"].get("completion_tokens") or 0) or usage
                    if tokens := _tokens_in(chunk):
                        chunks.append((now, tokens))
    finally:
        writer.close()
    end = time.perf_counter()
    if not chunks:
        return RequestSample(None, (), 0, end - start, "the stream carried no tokens")
    streamed = sum(tokens for _, tokens in chunks)
    return RequestSample(
        chunks[0][0] - start, _token_gaps(chunks), usage or streamed, end - start, arrivals=tuple(chunks)
    )


async def stream_request(
    target: _Target, body: Mapping[str, Any], api_key: str = "", timeout_s: float = 600.0
) -> RequestSample:
    """One streamed request, timed; failures become a sample with ``error`` (never raised)."""
    start = time.perf_counter()
    try:
        async with asyncio.timeout(timeout_s):
            return await _stream_once(target, body, api_key)
    except TimeoutError:
        return RequestSample(
            None, (), 0, time.perf_counter() - start, f"no full answer within {timeout_s:g} s"
        )
    except (OSError, ConnectionError, asyncio.IncompleteReadError, ValueError) as exc:
        return RequestSample(None, (), 0, time.perf_counter() - start, f"{type(exc).__name__}: {exc}"[:200])


async def run_level(
    target: _Target, config: LoadTestConfig, concurrency: int, first_index: int
) -> LevelResult:
    """``concurrency`` workers, closed loop: each sends ``warmup_requests_per_worker`` requests that are not
    recorded (the first wave, whose prompts all arrive at once, and any lazy set-up of a new batch size),
    then ``requests_per_worker`` recorded ones. The steady window runs from the last worker's end of
    warm-up to the first worker's last answer: all through it every worker has a recorded request in
    flight, so its tokens/s are the closed loop's at this concurrency, without the ramp or the tail."""
    warmup, per_worker = config.warmup_requests_per_worker, config.requests_per_worker
    indexes = itertools.count(first_index)
    samples: list[RequestSample] = []
    warm: list[float] = []  # clock time at which each worker ended its warm-up
    done: list[float] = []  # ... and its last request

    async def worker() -> None:
        for n in range(warmup + per_worker):
            sample = await stream_request(
                target, request_body(config, next(indexes)), config.api_key, config.timeout_s
            )
            if n >= warmup:
                samples.append(sample)
            if n + 1 == warmup:
                warm.append(time.perf_counter())
        done.append(time.perf_counter())

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    steady = (max(warm, default=start), min(done))
    return summarize_level(concurrency, samples, time.perf_counter() - start, steady, warmup * concurrency)


async def run_sweep(
    config: LoadTestConfig, on_level: Callable[[LevelResult], None] | None = None
) -> list[LevelResult]:
    """Every concurrency of ``config`` in order; ``on_level`` sees each result as it is done."""
    target = endpoint(config.url, config.chat)
    results: list[LevelResult] = []
    first = 0
    for concurrency in config.concurrencies:
        level = await run_level(target, config, concurrency, first)
        first += concurrency * (config.warmup_requests_per_worker + config.requests_per_worker)
        results.append(level)
        if on_level is not None:
            on_level(level)
    return results
