"""A small bounded HTTP load generator for the gateway tests and benchmark (loopback only).

``run_load`` sends each body once, with ``concurrency`` worker threads (each keeps its own
connection), either as fast as the workers allow (closed loop) or starting request *i* at
``i / rate`` seconds (open loop, so a slow server does not slow the arrivals down).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from glm_operator.planning.speed.knee import percentile as percentile


@dataclass(frozen=True)
class Result:
    status: int
    served_by: str | None
    seconds: float  # until the whole answer was read
    first_byte_seconds: float
    body: bytes
    headers: Mapping[str, str]


class _Client(threading.local):
    connection: http.client.HTTPConnection | None = None


def _loopback(url: str) -> tuple[str, int]:
    parsed = urllib.parse.urlsplit(url)
    host = parsed.hostname or ""
    if not (host.startswith("127.") or host == "::1"):
        raise ValueError(f"load is only sent to loopback, not {host}")
    return host, parsed.port or 80


def request(
    url: str,
    path: str,
    body: Mapping[str, Any] | None = None,
    *,
    api_key: str | None = None,
    connection: http.client.HTTPConnection | None = None,
    timeout: float = 60,
) -> Result:
    """One request (POST with a JSON body, GET without); errors become status 599."""
    host, port = _loopback(url)
    conn = connection or http.client.HTTPConnection(host, port, timeout=timeout)
    headers = {"Content-Type": "application/json"}
    if api_key is not None:
        headers["Authorization"] = f"Bearer {api_key}"
    started = time.perf_counter()
    try:
        if body is None:
            conn.request("GET", path, headers=headers)
        else:
            conn.request("POST", path, body=json.dumps(body).encode(), headers=headers)
        response = conn.getresponse()
        first = response.read(1)
        first_byte = time.perf_counter() - started
        data = first + response.read()
        elapsed = time.perf_counter() - started
        answer = Result(
            response.status,
            response.getheader("X-Served-By"),
            elapsed,
            first_byte,
            data,
            {k.lower(): v for k, v in response.getheaders()},
        )
        if response.will_close:
            conn.close()
        return answer
    except (OSError, http.client.HTTPException) as err:
        conn.close()
        elapsed = time.perf_counter() - started
        return Result(599, None, elapsed, elapsed, str(err).encode(), {})
    finally:
        if connection is None:
            conn.close()


def run_load(
    url: str,
    bodies: Sequence[Mapping[str, Any]],
    *,
    concurrency: int,
    rate: float | None = None,
    api_key: str | None = None,
    path: str = "/v1/chat/completions",
    timeout: float = 60,
) -> list[Result]:
    """Send every body once; results in the order of ``bodies``."""
    host, port = _loopback(url)
    local = _Client()
    start = time.perf_counter()

    def one(index: int) -> Result:
        if rate is not None:
            delay = start + index / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        if local.connection is None:
            local.connection = http.client.HTTPConnection(host, port, timeout=timeout)
        return request(url, path, bodies[index], api_key=api_key, connection=local.connection)

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        return list(pool.map(one, range(len(bodies))))
