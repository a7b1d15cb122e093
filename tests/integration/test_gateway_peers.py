"""Per-key limits across gateway replicas: two real HAProxy processes on loopback share the per-key
stick table through a ``peers`` section (what the sync sidecar renders for the gateway's pods), so
one key's requests-per-minute limit holds over both, requests counted. A replica that was down
learns the table again from the other when it comes back.

No timed asserts: after each request the test waits (bounded) until the other replica's table
shows it, as a client spread over replicas slower than the peers' push would see.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from glm_operator.clients.haproxy import send
from glm_operator.gateway.haproxy_config import Peer
from glm_operator.gateway.routes import RoutingTable
from tests.harness.cluster import free_port, wait_for
from tests.harness.haproxy import LocalGateway
from tests.harness.load import request

pytestmark = pytest.mark.integration
KEY, CLIENT, LIMIT = "sk-shared", "team-a", 10


def remote_peer(gateway: LocalGateway) -> str:
    """``show peers``' entry of the other replica."""
    entries = send(gateway.settings.runtime_socket, "show peers").split("  0x")
    return next((e for e in entries if "(remote," in e), "")


def settled(gateway: LocalGateway) -> bool:
    """This replica's session with the other is up and has been for 2 s. Started together, both
    dial at once; HAProxy settles the collision by dropping the sessions and dialling again within
    a second or two, and an update pushed in that moment can be lost (it comes with the next one)."""
    entry = remote_peer(gateway)
    age = re.search(r"last_hdshk=(\d+)s", entry)
    return "(remote,active)" in entry and "last_status=ESTA" in entry and age is not None and int(age[1]) >= 2


def counted(gateway: LocalGateway) -> int:
    """Requests of CLIENT this replica knows of: its own table and its copies of the others'."""
    tables = [f"per_key_{p.name}" for p in gateway.settings.peers]
    return sum(
        e.requests_total for t in tables for e in gateway.runtime.key_counters(t) if e.client == CLIENT
    )


def wait_for_push(gateway: LocalGateway, requests: int, timeout: float = 10) -> bool:
    try:
        wait_for(lambda: counted(gateway) >= requests or None, timeout=timeout, what="the push")
    except AssertionError:
        return False
    return True


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[tuple[LocalGateway, LocalGateway]]:
    keys = tmp_path / "keys.map"
    keys.write_text(f"{KEY} {CLIENT}\n")
    peers = (Peer("gw-a", "127.0.0.1", free_port()), Peer("gw-b", "127.0.0.1", free_port()))
    gateways = []
    for peer in peers:
        workdir = tmp_path / peer.name
        workdir.mkdir()
        gateways.append(
            LocalGateway(
                workdir, keys_file=str(keys), requests_per_minute=LIMIT, peers=peers, local_peer=peer.name
            )
        )
    a, b = gateways
    try:
        a.start(RoutingTable(()))
        b.start(RoutingTable(()))
        wait_for(lambda: settled(a) and settled(b), timeout=30, what="the replicas' peer sessions")
        yield a, b
    finally:
        a.stop()
        b.stop()


def test_one_keys_limit_holds_across_two_replicas(replicas: tuple[LocalGateway, LocalGateway]) -> None:
    a, b = replicas
    statuses: Counter[tuple[str, int]] = Counter()
    for i in range(LIMIT):
        here, there = (a, b) if i % 2 == 0 else (b, a)
        result = request(here.url, "/v1/models", api_key=KEY)
        statuses[("a" if here is a else "b", result.status)] += 1
        if not wait_for_push(there, i + 1):
            tables = [send(g.settings.runtime_socket, "show table per_key") for g in (a, b)]
            peers = [send(g.settings.runtime_socket, "show peers") for g in (a, b)]
            raise AssertionError(
                f"request {i + 1} ({result.status}) not in the other table: {tables}\n{peers}"
            )
    assert statuses == {("a", 200): LIMIT // 2, ("b", 200): LIMIT // 2}, "each replica let half through"

    # The key used its 10 requests over both: the next one is refused on either replica.
    for gateway in (a, b):
        over = request(gateway.url, "/v1/models", api_key=KEY)
        assert over.status == 429, over.body
        assert b"rate_limit_exceeded" in over.body and over.headers.get("retry-after") == "6"
    other = request(a.url, "/v1/models", api_key="sk-unknown")
    assert other.status == 401

    # One replica down and back: the restarted one starts empty and learns the table from the other.
    b.stop()
    assert request(a.url, "/v1/models", api_key=KEY).status == 429, "the survivor keeps counting"
    b.start(None)
    wait_for(lambda: counted(b) >= LIMIT or None, timeout=10, what="the restarted replica's resync")
    assert request(b.url, "/v1/models", api_key=KEY).status == 429
