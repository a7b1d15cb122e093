"""HAProxy configuration and runtime commands for a routing table (pure: text in, text out).

The gateway is HAProxy: least outstanding requests per unit of weight (``balance leastconn``),
the request body buffered to route on its ``model`` field (``req.body,json_query``), a
name -> backend map, API keys from a map file, per-key stick-table counters for the rate,
concurrency and tokens-per-minute limits (``usage.lua`` counts each answer's tokens), and a runtime
API to move members without a reload.

Files in the config directory: ``haproxy.cfg``, ``models.map`` (served name -> backend),
``models.json`` (the ``GET /v1/models`` answer) and ``retry-after.map`` (backend -> Retry-After
of its 503 while no replica is ready), besides the allow-lists and ``hold.lua``. They change only
when the set of served names or the settings change; then the proxy reloads gracefully (the old
process finishes its requests). A pod that joins, leaves or changes readiness is one slot of a
backend, changed with :func:`runtime_commands` (``set server ... addr/weight/state``) and no
reload; a model's new wake-up estimate is one ``set map`` (:func:`retry_after_commands`): a
reload would strand the requests held in the old process (nothing tells it a replica is ready).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from functools import cache
from pathlib import PurePosixPath
from typing import Literal

import jinja2

from glm_operator.gateway.routes import Backend, Member, RoutingTable

CONFIG_FILE = "haproxy.cfg"
MODELS_MAP_FILE = "models.map"
MODELS_JSON_FILE = "models.json"
RESTRICTED_CLIENTS_FILE = "restricted-clients.map"  # clients with a model allow-list
ALLOWED_MODELS_FILE = "allowed-models.map"  # "<client>/<served name>" of each allow-list


def client_models_file(index: int) -> str:
    """The ``GET /v1/models`` answer of the index-th client with an allow-list (its models only)."""
    return f"models-client-{index}.json"


HOLD_LUA_FILE = "hold.lua"  # holds requests for a model without a usable server
ROUTE_LUA_FILE = "route.lua"  # cache-aware routing (balance "cache")
#: vLLM's KV-cache block, in tokens (its default --block-size): prompts are hashed in blocks of it.
CACHE_BLOCK_TOKENS = 16
#: Shortest run of cached blocks the cache-aware route follows (128 tokens): a shorter one (a chat
#: template's header, a short instruction every request shares) counts as none.
CACHE_MIN_RUN_BLOCKS = 8
#: Leading blocks of one prompt the cache-aware route considers (256k tokens at 16 a block).
CACHE_MAX_BLOCKS = 16384
#: Block hashes the cache-aware route remembers per server (about 0.5 M tokens; ~40 bytes each in
#: HAProxy's Lua state, so at most ~20 MiB for 8 servers of a backend).
CACHE_BLOCKS_PER_SERVER = 32768
USAGE_LUA_FILE = "usage.lua"  # counts the tokens of each answer (the tokens-per-minute limit)
#: A stream without a usage chunk: its prompt is estimated as this many request-body bytes a token.
BYTES_PER_TOKEN = 4
STREAM_SOCKET_FILE = "held-streams.sock"  # hold.lua sends a held stream's request through it
RETRY_AFTER_MAP_FILE = "retry-after.map"  # backend -> Retry-After of its 503 (expected wake-up)
#: The table and settings the files were rendered from, so a restarted sync process (or the
#: sidecar after the init container) continues with runtime commands instead of a reload.
STATE_FILE = "state.json"

#: leastconn / roundrobin: HAProxy's. "cache": cache-aware (``route.lua``): the server that already
#: served the longest run of the prompt's leading blocks, while its load stays within
#: ``affinity_load_factor`` percent of its share; ties and prompts no server has seen go to the
#: fewest requests in flight per unit of weight. "first_message": bounded-load consistent hashing of
#: the first chat message, what PrefixAffinity did before "cache"; no API value renders it any more,
#: it stays as the baseline of ``benchmarks/cache_routing_bench.py``.
Balance = Literal["leastconn", "roundrobin", "cache", "first_message"]

HTTP_PORT = 8080  # the OpenAI-compatible endpoint
PROXY_METRICS_PORT = 8404  # HAProxy's Prometheus exporter
PEERS_PORT = 10000  # HAProxy peers: the per-key table shared by the gateway's replicas
PEERS_SECTION = "gateway"
#: What the per-key tables store, tokens included whether or not a limit counts them: replicas whose
#: table definitions differ (one reloaded with a limit, one not yet) would stop sharing the table.
KEY_COUNTERS = "http_req_rate(60s),http_req_cnt,gpc0,gpc1,gpc1_rate(60s)"
WAKE_TABLE = "wake"  # backends requested while none of their servers was usable


def key_table_name(local_peer: str | None) -> str:
    """The per-key table a replica writes: ``per_key`` alone, with peers ``per_key_<pod>`` (one per
    replica, written by that replica alone and replicated to the others)."""
    return f"per_key_{local_peer}" if local_peer else "per_key"


@dataclass(frozen=True)
class Peer:
    """One gateway replica in the ``peers`` section (this one included)."""

    name: str  # the pod name; the local one is ``GatewaySettings.local_peer``
    address: str
    port: int = PEERS_PORT


@dataclass(frozen=True)
class GatewaySettings:
    """Everything in the proxy configuration that does not come from the routing table."""

    config_dir: str
    runtime_socket: str
    bind_address: str = "0.0.0.0"
    port: int = HTTP_PORT
    metrics_port: int | None = PROXY_METRICS_PORT
    keys_file: str | None = None  # "<api key> <client name>" per line; None: no auth
    requests_per_minute: int | None = None  # per key
    tokens_per_minute: int | None = None  # per key: usage of its answers (usage.lua)
    max_concurrent_requests: int | None = None  # per key
    read_timeout_seconds: int = 600
    connect_timeout_seconds: int = 5
    max_body_bytes: int = 20 * 1024 * 1024
    routing_buffer_bytes: int = 256 * 1024
    balance: Balance = "leastconn"
    affinity_load_factor: int = 150
    slots: int = 32
    health_check_interval_seconds: int = 5
    fail_timeout_seconds: int = 10
    max_fails: int = 2
    log_requests: bool = False
    #: Every gateway replica (this one included, named ``local_peer``): the per-key table is
    #: shared through HAProxy's peers protocol, so the limits hold across replicas. Empty: local.
    peers: tuple[Peer, ...] = ()
    local_peer: str | None = None
    #: Retry-After of the 503 for a model without a usable server (scaled to zero, starting) whose
    #: wake-up was never measured; a measured one (``Backend.wake_up_seconds``) takes its place.
    wake_retry_after_seconds: int = 30
    #: Requests held per model and replica while no server is usable (0: 503 at once), and how
    #: long each is held at most before the 503.
    hold_max_requests: int = 100
    hold_max_wait_seconds: int = 300
    #: A held ``"stream": true`` request gets an SSE comment this often while it waits.
    hold_keepalive_seconds: int = 5
    #: Clients that may call only some models (spec.clients): (client, served names).
    allowed_models: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def key_table(self) -> str:
        """The per-key table this replica writes (``key_table_name``)."""
        return key_table_name(self.local_peer if self.peers else None)

    @property
    def rate_retry_after_seconds(self) -> int:
        """Seconds until the one-minute window frees one request at the configured rate."""
        return max(1, math.ceil(60 / self.requests_per_minute)) if self.requests_per_minute else 1

    @property
    def counts_tokens(self) -> bool:
        """Whether answers are counted in tokens (usage.lua): a tokens-per-minute limit on keys."""
        return bool(self.keys_file and self.tokens_per_minute)


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("glm_operator.gateway", "templates"),
        auto_reload=False,  # templates ship with the package: no stat of each file on every render
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
    )


def _address(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def render_config(table: RoutingTable, settings: GatewaySettings) -> str:
    """``haproxy.cfg`` for the table, with the current members already in their slots."""
    backends = [
        Backend(
            model=b.model,
            name=b.name,
            members=tuple(
                Member(m.slot, m.pod, _address(m.address), m.port, m.weight, m.ready) for m in b.members
            ),
        )
        for b in table.backends
    ]
    directory = PurePosixPath(settings.config_dir)
    return (
        _environment()
        .get_template("haproxy.cfg.j2")
        .render(
            s=settings,
            backends=backends,
            models_map=str(directory / MODELS_MAP_FILE),
            models_json=str(directory / MODELS_JSON_FILE),
            client_models=[
                (client, str(directory / client_models_file(index)))
                for index, (client, _) in enumerate(settings.allowed_models)
            ],
            restricted_map=str(directory / RESTRICTED_CLIENTS_FILE),
            allowed_map=str(directory / ALLOWED_MODELS_FILE),
            wake_table=WAKE_TABLE,
            hold_lua=str(directory / HOLD_LUA_FILE),
            route_lua=str(directory / ROUTE_LUA_FILE),
            usage_lua=str(directory / USAGE_LUA_FILE),
            retry_after_map=str(directory / RETRY_AFTER_MAP_FILE),
            stream_socket=str(directory / STREAM_SOCKET_FILE),
            peers=[Peer(p.name, _address(p.address), p.port) for p in settings.peers],
            peer_tables=[key_table_name(p.name) for p in settings.peers],
            peers_section=PEERS_SECTION,
            key_counters=KEY_COUNTERS,
        )
    )


def render_models_map(table: RoutingTable) -> str:
    """``<served name> <backend>`` per line (served names never contain spaces)."""
    return "".join(f"{b.model} {b.name}\n" for b in table.backends)


def render_models_json(table: RoutingTable, only: tuple[str, ...] | None = None) -> str:
    """The OpenAI ``GET /v1/models`` list of every served name (``only``: those of them in it)."""
    models = [m for m in table.models if only is None or m in only]
    data = [{"id": model, "object": "model", "owned_by": "glm-operator"} for model in models]
    return json.dumps({"object": "list", "data": data}, separators=(",", ":")) + "\n"


def render_client_models(table: RoutingTable, settings: GatewaySettings) -> dict[str, str]:
    """One ``GET /v1/models`` answer per client with an allow-list: the served names it may call."""
    if not settings.keys_file:
        return {}
    return {
        client_models_file(index): render_models_json(table, models)
        for index, (_, models) in enumerate(settings.allowed_models)
    }


def retry_after_seconds(backend: Backend, settings: GatewaySettings) -> int:
    """Retry-After of the backend's 503 while no replica is ready: its expected wake-up in whole
    seconds (rounded up, at least 1), else the configured ``wake_retry_after_seconds``."""
    if backend.wake_up_seconds is None:
        return settings.wake_retry_after_seconds
    return max(1, math.ceil(backend.wake_up_seconds))


def render_retry_after_map(table: RoutingTable, settings: GatewaySettings) -> str:
    """``<backend> <seconds>`` per line, every backend (``set map`` changes only existing keys)."""
    return "".join(f"{b.name} {retry_after_seconds(b, settings)}\n" for b in table.backends)


def retry_after_commands(old: RoutingTable, new: RoutingTable, settings: GatewaySettings) -> list[str]:
    """``set map`` commands for the backends (same as ``old``'s) whose Retry-After changed."""
    path = str(PurePosixPath(settings.config_dir) / RETRY_AFTER_MAP_FILE)
    commands = []
    for backend in new.backends:
        before = old.backend(backend.model)
        seconds = retry_after_seconds(backend, settings)
        if before is None or retry_after_seconds(before, settings) != seconds:
            commands.append(f"set map {path} {backend.name} {seconds}")
    return commands


def render_allow_lists(settings: GatewaySettings) -> dict[str, str]:
    """The two map files of the model allow-lists (none without one)."""
    if not settings.allowed_models:
        return {}
    return {
        RESTRICTED_CLIENTS_FILE: "".join(f"{client} 1\n" for client, _ in settings.allowed_models),
        ALLOWED_MODELS_FILE: "".join(
            f"{client}/{model} 1\n" for client, models in settings.allowed_models for model in models
        ),
    }


def render_files(table: RoutingTable, settings: GatewaySettings) -> dict[str, str]:
    """File name -> content of everything the proxy reads at start."""
    return {
        CONFIG_FILE: render_config(table, settings),
        MODELS_MAP_FILE: render_models_map(table),
        MODELS_JSON_FILE: render_models_json(table),
        RETRY_AFTER_MAP_FILE: render_retry_after_map(table, settings),
        **render_allow_lists(settings),
        **render_client_models(table, settings),
        **({HOLD_LUA_FILE: render_hold_lua(settings)} if settings.hold_max_requests else {}),
        **({USAGE_LUA_FILE: render_usage_lua()} if settings.counts_tokens else {}),
        **({ROUTE_LUA_FILE: render_route_lua(settings)} if settings.balance == "cache" else {}),
        STATE_FILE: render_state(table, settings),
    }


def render_hold_lua(settings: GatewaySettings) -> str:
    """``hold.lua`` with the hold's bounds and the held_streams socket of these settings."""
    stream_socket = str(PurePosixPath(settings.config_dir) / STREAM_SOCKET_FILE)
    return _environment().get_template(HOLD_LUA_FILE).render(s=settings, stream_socket=stream_socket)


def render_route_lua(settings: GatewaySettings) -> str:
    """``route.lua``: the cache-aware choice of a server (balance "cache")."""
    return (
        _environment()
        .get_template(ROUTE_LUA_FILE)
        .render(
            block_tokens=CACHE_BLOCK_TOKENS,
            bytes_per_token=BYTES_PER_TOKEN,
            max_blocks=CACHE_MAX_BLOCKS,
            cache_blocks=CACHE_BLOCKS_PER_SERVER,
            load_factor=settings.affinity_load_factor,
            min_run_blocks=CACHE_MIN_RUN_BLOCKS,
        )
    )


def render_usage_lua() -> str:
    """``usage.lua``: the filter that counts each answer's tokens into the key's table entry."""
    return _environment().get_template(USAGE_LUA_FILE).render(bytes_per_token=BYTES_PER_TOKEN)


def render_state(table: RoutingTable, settings: GatewaySettings) -> str:
    state = {
        "settings": dataclasses.asdict(settings),
        "backends": [dataclasses.asdict(b) for b in table.backends],
    }
    return json.dumps(state, sort_keys=True) + "\n"


def parse_state(text: str) -> tuple[RoutingTable, GatewaySettings] | None:
    """The table and settings of :func:`render_state`; None when unreadable (then the proxy reloads)."""
    try:
        state = json.loads(text)
        backends = tuple(
            Backend(b["model"], b["name"], tuple(Member(**m) for m in b["members"]), b.get("wake_up_seconds"))
            for b in state["backends"]
        )
        settings = dict(state["settings"])
        settings["peers"] = tuple(Peer(**p) for p in settings.get("peers") or ())
        settings["allowed_models"] = tuple(
            (str(client), tuple(models)) for client, models in settings.get("allowed_models") or ()
        )
        return RoutingTable(backends), GatewaySettings(**settings)
    except (ValueError, KeyError, TypeError):
        return None


def needs_reload(old: RoutingTable | None, new: RoutingTable) -> bool:
    """Whether the proxy must load a new configuration: the set of backends changed."""
    return old is None or [b.name for b in old.backends] != [b.name for b in new.backends]


def _slot_commands(backend: str, slot: int, old: Member | None, new: Member | None) -> list[str]:
    server = f"{backend}/s{slot}"
    if new is None:
        return [f"set server {server} state maint"] if old is not None and old.ready else []
    commands = []
    if old is None or (old.address, old.port) != (new.address, new.port):
        commands.append(f"set server {server} addr {new.address} port {new.port}")
    if old is None or old.weight != new.weight:
        commands.append(f"set server {server} weight {new.weight}")
    moved = old is None or old.pod != new.pod
    if new.ready and (moved or not old or not old.ready):
        commands.append(f"set server {server} state ready")
        # The pod's Ready condition is its readiness probe on /health, what the active check asks:
        # up at once, not at the next check (up to its interval later: the end of a wake-up).
        commands.append(f"set server {server} health up")
    elif not new.ready and (old is None or old.ready):
        commands.append(f"set server {server} state maint")
    return commands


def runtime_commands(old: RoutingTable, new: RoutingTable) -> list[str]:
    """Runtime API commands that turn the members of ``old`` into those of ``new`` (same backends).

    A slot that loses its pod or whose pod turns unready goes to maintenance: no new requests,
    requests in flight finish. A new pod gets its address and weight before it is made ready, and
    is marked healthy with it (its Ready condition is the same /health check).
    """
    commands: list[str] = []
    for new_backend in new.backends:
        old_backend = old.backend(new_backend.model)
        slots = {m.slot for m in new_backend.members} | (
            {m.slot for m in old_backend.members} if old_backend else set()
        )
        for slot in sorted(slots):
            before = old_backend.member(slot) if old_backend else None
            after = new_backend.member(slot)
            if before is not None and after is not None and before.pod != after.pod and before.ready:
                # Another pod takes the slot: stop new requests to the old address first.
                commands.append(f"set server {new_backend.name}/s{slot} state maint")
                before = Member(before.slot, before.pod, before.address, before.port, before.weight, False)
            commands.extend(_slot_commands(new_backend.name, slot, before, after))
    return commands
