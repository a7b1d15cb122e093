"""The gateway's rendered HAProxy configuration passes the real ``haproxy -c`` (Debian's haproxy,
``$HAPROXY_BIN`` or /usr/sbin/haproxy; hack/system-packages.sh installs it). No cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from glm_operator.gateway.haproxy_config import Peer, render_files
from glm_operator.gateway.proxy import write_files
from tests.harness.haproxy import check_config
from tests.unit.test_gateway_config import _settings, _table

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"keys_file": None, "requests_per_minute": None, "max_concurrent_requests": None},
        {"balance": "roundrobin", "metrics_port": None, "log_requests": True},
        {"requests_per_minute": None},
        {"balance": "cache"},
        {"balance": "cache", "allowed_models": (("team-a", ("glm-4.5-air",)),), "hold_max_requests": 0},
        {"balance": "first_message"},
        {
            "peers": (Peer("gw-a", "127.0.0.1", 10000), Peer("gw-b", "::1", 10001)),
            "local_peer": "gw-a",
            "allowed_models": (("team-a", ("glm-4.5-air",)),),
        },
        {"hold_max_requests": 0},
        {"tokens_per_minute": 10000},
        {
            "tokens_per_minute": 10000,
            "peers": (Peer("gw-a", "127.0.0.1", 10000), Peer("gw-b", "::1", 10001)),
            "local_peer": "gw-b",
        },
    ],
    ids=[
        "full",
        "no-auth",
        "roundrobin",
        "concurrency-only",
        "cache-aware",
        "cache-aware-allow-lists-no-hold",
        "first-message-affinity",
        "peers-and-allow-lists",
        "no-hold",
        "tokens-per-minute",
        "tokens-per-minute-with-peers",
    ],
)
def test_rendered_config_passes_haproxy_check(tmp_path: Path, changes: dict[str, object]) -> None:
    settings = _settings(tmp_path, **changes)
    files = render_files(_table(), settings)
    write_files(files, tmp_path)
    checked = check_config(files["haproxy.cfg"])
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "ALERT" not in checked.stderr
