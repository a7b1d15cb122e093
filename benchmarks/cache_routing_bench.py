"""Cache-aware routing against first-message affinity and least-connections, on the real HAProxy.

Usage: .venv/bin/python -m benchmarks.cache_routing_bench [--pods 4] [--seed 1]

Four vLLM emulators (each its own process, on 127.0.0.2-5) stand for four replicas: each batches
``--batch`` requests at once (more wait), prefills at ``--prefill-tokens-per-second`` and keeps a
prefix cache of ``--cache-blocks`` 16-token blocks (least recently used evicted); a cached block is
not prefilled again. The gateway (HAProxy with the operator's configuration) routes by one policy
at a time, over fresh emulators (empty caches):

- ``cache``: cache-aware (loadBalancing: PrefixAffinity, route.lua): the replica that already served
  the longest run of the prompt's leading blocks, within its load cap; else least-connections;
- ``first_message``: what PrefixAffinity was before: bounded-load consistent hashing of the first
  message's content;
- ``leastconn``: fewest outstanding requests (LeastRequests).

Two traces, the same for every policy (``--seed``), streamed requests (TTFT = first byte of the
answer's body, queueing included):

1. multi-turn chat: ``--conversations`` users, each a conversation of ``--turns`` turns (a question of
   ~200 tokens, the answer of ~100 tokens fed back), a pause of 0.2-1 s between turns; the
   conversations share one of three long system prompts (~1,000 tokens), so their first message
   says little about where their history is;
2. shared documents: ``--documents`` documents of ~6,000 tokens, each asked ``--questions``
   different questions, behind one common short system prompt, arriving in random order at
   ``--rate`` requests per second.

Prints, per trace and policy, TTFT p50/p95 and the prefix-cache hit rate (prompt tokens found in the
replica's cache over prompt tokens, from each answer's usage.prompt_tokens_details.cached_tokens,
as vLLM reports it), and the requests per replica. Asserts nothing; loopback on a shared machine
is noisy: compare the policies within one run.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from tests.harness.cluster import free_port
from tests.harness.gateway_objects import H100
from tests.harness.load import Result, percentile, request, run_load

from benchmarks.gateway_bench import KEY, MODEL, gateway, table_for

POLICIES = ("cache", "first_message", "leastconn")
WORDS = [
    "invoice",
    "account",
    "refund",
    "policy",
    "contract",
    "clause",
    "payment",
    "balance",
    "customer",
    "service",
    "support",
    "ticket",
    "order",
    "shipment",
    "delivery",
    "warranty",
    "return",
    "schedule",
    "meeting",
    "report",
    "summary",
    "budget",
    "forecast",
    "quarter",
    "revenue",
    "margin",
    "risk",
    "audit",
    "compliance",
    "security",
    "access",
    "password",
    "network",
    "latency",
    "throughput",
]


@dataclass(frozen=True)
class Emulation:
    pods: int
    batch: int
    prefill_tokens_per_second: float
    seconds_per_output_token: float
    cache_blocks: int


@contextmanager
def replicas(emulation: Emulation, port: int) -> Iterator[list[str]]:
    """The emulators, each in its own process; yields their addresses."""
    procs = []
    try:
        for i in range(emulation.pods):
            host = f"127.0.0.{i + 2}"
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.harness.vllm_emulator", "--model", MODEL, "--host", host,
                 "--port", str(port), "--name", host, "--max-concurrency", str(emulation.batch),
                 "--base-seconds", "0.005",
                 "--seconds-per-prompt-token", str(1 / emulation.prefill_tokens_per_second),
                 "--seconds-per-output-token", str(emulation.seconds_per_output_token),
                 "--num-gpu-blocks", str(emulation.cache_blocks), "--max-seconds", "900"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            procs.append(proc)
            assert proc.stdout is not None and proc.stdout.readline().strip() == str(port).encode()
        yield [f"127.0.0.{i + 2}" for i in range(emulation.pods)]
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=10)


def text(rng: random.Random, tokens: int) -> str:
    """About ``tokens`` tokens of words (the emulator counts four characters a token)."""
    words: list[str] = []
    length = 0
    while length < tokens * 4:
        word = rng.choice(WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)


def streamed(messages: list[dict[str, str]], max_tokens: int) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": messages,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def usage_of(result: Result) -> tuple[int, int]:
    """(prompt tokens, cached prompt tokens) from a streamed answer's last usage chunk."""
    for line in reversed(result.body.decode(errors="replace").splitlines()):
        if line.startswith("data: {") and '"usage"' in line:
            usage = json.loads(line[6:])["usage"]
            return int(usage["prompt_tokens"]), int(usage["prompt_tokens_details"]["cached_tokens"])
    return 0, 0


@dataclass(frozen=True)
class Figures:
    ttft_p50: float
    ttft_p95: float
    hit_rate: float
    per_replica: dict[str, int]
    failed: int


def figures(results: Sequence[Result]) -> Figures:
    ok = [r for r in results if r.status == 200]
    prompt = cached = 0
    for r in ok:
        p, c = usage_of(r)
        prompt += p
        cached += c
    ttft = [r.first_byte_seconds for r in ok]
    return Figures(
        percentile(ttft, 0.5),
        percentile(ttft, 0.95),
        cached / prompt if prompt else 0.0,
        dict(sorted(Counter(str(r.served_by) for r in ok).items())),
        len(results) - len(ok),
    )


def chat_trace(rng: random.Random, conversations: int, turns: int) -> list[list[tuple[str, str, float]]]:
    """Per conversation, its turns: (question, answer fed back next turn, pause before it)."""
    return [
        [(text(rng, 200), text(rng, 100), rng.uniform(0.2, 1.0)) for _ in range(turns)]
        for _ in range(conversations)
    ]


def run_chat(
    url: str, systems: Sequence[str], trace: list[list[tuple[str, str, float]]], max_tokens: int
) -> list[Result]:
    results: list[Result] = []
    lock = threading.Lock()

    def user(index: int, turns: list[tuple[str, str, float]]) -> None:
        history = [{"role": "system", "content": systems[index % len(systems)]}]
        time.sleep(index * 0.05)
        for question, answer, pause in turns:
            time.sleep(pause)
            history.append({"role": "user", "content": question})
            result = request(url, "/v1/chat/completions", streamed(history, max_tokens), api_key=KEY)
            with lock:
                results.append(result)
            history.append({"role": "assistant", "content": answer})

    threads = [threading.Thread(target=user, args=(i, turns)) for i, turns in enumerate(trace)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def document_bodies(
    rng: random.Random, documents: int, questions: int, max_tokens: int
) -> list[dict[str, Any]]:
    system = "Answer the question from the document. Quote the lines you use."
    docs = [f"Document {d}.\n" + text(rng, 6000) for d in range(documents)]
    bodies = [
        streamed(
            [
                {"role": "system", "content": system},
                {"role": "user", "content": f"{doc}\n\nQuestion: {text(rng, 40)}?"},
            ],
            max_tokens,
        )
        for doc in docs
        for _ in range(questions)
    ]
    rng.shuffle(bodies)
    return bodies


def measure(emulation: Emulation, policy: str, run: Any) -> Figures:
    port = free_port()
    with ExitStack() as stack:
        hosts = stack.enter_context(replicas(emulation, port))
        table = table_for(port, [(H100, float(emulation.batch))], [(H100, host) for host in hosts])
        gw = stack.enter_context(gateway(table, balance=policy, slots=8))
        return figures(run(gw.url))


def report(title: str, results: dict[str, Figures]) -> None:
    print(title)
    print(f"   {'policy':<14} {'TTFT p50':>9} {'TTFT p95':>9} {'cache hits':>10}   requests per replica")
    for policy, f in results.items():
        spread = " ".join(f"{n}" for n in f.per_replica.values())
        failed = f"  ({f.failed} failed)" if f.failed else ""
        print(
            f"   {policy:<14} {f.ttft_p50 * 1000:>7.0f}ms {f.ttft_p95 * 1000:>7.0f}ms "
            f"{f.hit_rate:>10.2f}   {spread}{failed}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pods", type=int, default=4)
    parser.add_argument("--batch", type=int, default=4, help="requests each replica serves at once")
    parser.add_argument("--prefill-tokens-per-second", type=float, default=20000.0)
    parser.add_argument("--cache-blocks", type=int, default=1200, help="prefix-cache blocks per replica")
    parser.add_argument("--conversations", type=int, default=24)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--documents", type=int, default=4)
    parser.add_argument("--questions", type=int, default=24)
    parser.add_argument("--rate", type=float, default=8.0, help="shared-document requests per second")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    emulation = Emulation(args.pods, args.batch, args.prefill_tokens_per_second, 0.002, args.cache_blocks)

    rng = random.Random(args.seed)
    systems = [f"System prompt {s}. " + text(rng, 1000) for s in range(3)]
    trace = chat_trace(rng, args.conversations, args.turns)
    chat = {
        policy: measure(emulation, policy, lambda url: run_chat(url, systems, trace, 16))
        for policy in POLICIES
    }
    bodies = document_bodies(rng, args.documents, args.questions, 16)
    documents = {
        policy: measure(
            emulation,
            policy,
            lambda url: run_load(url, bodies, concurrency=32, rate=args.rate, api_key=KEY),
        )
        for policy in POLICIES
    }
    print(
        f"{args.pods} replicas, {args.batch} requests at once each, prefill "
        f"{args.prefill_tokens_per_second:.0f} tokens/s, prefix cache {args.cache_blocks} blocks "
        f"({args.cache_blocks * 16} tokens) each; seed {args.seed}"
    )
    report(
        f"1. multi-turn chat: {args.conversations} conversations x {args.turns} turns, "
        "3 shared system prompts of ~1,000 tokens",
        chat,
    )
    report(
        f"2. shared documents: {args.documents} documents of ~6,000 tokens x {args.questions} questions, "
        f"{args.rate:.0f} requests/s",
        documents,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
