"""A reload that fails is owed: the next apply reloads even though the files on disk are current.

The real-HAProxy check is tests/integration/test_gateway_reload.py; this one drives the API-key path
of ``GatewaySync.step`` (new files, ``driver.reload()``, then the next step's ``apply``) with a runtime
whose first reload fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from glm_operator.clients.haproxy import HAProxyError
from glm_operator.gateway.haproxy_config import GatewaySettings
from glm_operator.gateway.proxy import ProxyDriver
from glm_operator.gateway.routes import Backend, Member, RoutingTable, backend_name


class FlakyRuntime:
    master_socket = "master.sock"

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.reloads = 0

    def reload(self) -> None:
        self.reloads += 1
        if self.failures:
            self.failures -= 1
            raise HAProxyError("HAProxy did not start a new worker within 10s of a reload")

    def execute(self, commands: list[str]) -> None:
        pass


def test_the_key_paths_failed_reload_is_retried_by_the_next_apply(tmp_path: Path) -> None:
    keys = tmp_path / "keys.map"
    keys.write_text("sk-test-1 team-a\n")
    settings = GatewaySettings(
        config_dir=str(tmp_path), runtime_socket=str(tmp_path / "admin.sock"), keys_file=str(keys)
    )
    table = RoutingTable(
        (Backend("air", backend_name("air"), (Member(1, "air-0", "10.0.0.1", 8000, 1, True),)),)
    )
    runtime = FlakyRuntime(failures=0)
    driver = ProxyDriver(settings, cast(Any, runtime))
    assert driver.apply(table) == "reload"
    runtime.failures = 1
    # the key path of GatewaySync.step: new files and a reload, which fails
    driver.current = None
    driver.write(table)
    with pytest.raises(HAProxyError):
        driver.reload()
    assert driver.apply(table) == "reload"  # the files are current, the reload still owed
    assert runtime.reloads == 3
    assert driver.apply(table) == "none"
    assert runtime.reloads == 3
