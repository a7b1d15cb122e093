"""Keep a running HAProxy in step with a routing table: files + reload, or runtime commands."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from glm_operator.clients.haproxy import HAProxyRuntime
from glm_operator.gateway.haproxy_config import (
    STATE_FILE,
    GatewaySettings,
    needs_reload,
    parse_state,
    render_files,
    retry_after_commands,
    runtime_commands,
)
from glm_operator.gateway.routes import RoutingTable

log = logging.getLogger(__name__)


def write_files(files: dict[str, str], directory: Path) -> list[str]:
    """Write each file atomically (rename), skipping unchanged ones; the names of those written."""
    directory.mkdir(parents=True, exist_ok=True)
    changed = []
    for name, content in files.items():
        path = directory / name
        if path.exists() and path.read_text() == content:
            continue
        partial = path.with_name(f".{name}.partial")
        partial.write_text(content)
        os.replace(partial, path)
        changed.append(name)
    return changed


class ProxyDriver:
    """Applies routing tables to one HAProxy: a reload when the backends change, else runtime commands."""

    def __init__(self, settings: GatewaySettings, runtime: HAProxyRuntime | None) -> None:
        self.settings = settings
        self.runtime = runtime
        self.current: RoutingTable | None = None
        self._applied_settings: GatewaySettings | None = None
        # files written for a reload that has not succeeded yet: the next apply reloads even when they
        # are already on disk (a failed reload would otherwise leave HAProxy on the old config)
        self._reload_owed = False

    def resume(self) -> None:
        """Take over from the process that wrote the config directory (the init container)."""
        try:
            state = parse_state((Path(self.settings.config_dir) / STATE_FILE).read_text())
        except OSError:
            return
        if state is not None:
            self.current, self._applied_settings = state

    def write(self, table: RoutingTable) -> list[str]:
        """Write the proxy's files for ``table`` (before it starts, or to be reloaded)."""
        self._applied_settings = self.settings
        return write_files(render_files(table, self.settings), Path(self.settings.config_dir))

    def apply(self, table: RoutingTable) -> str:
        """Bring the proxy to ``table``; returns what was done ("reload", "runtime", "none")."""
        old = self.current
        same_settings = self._applied_settings == self.settings
        if old is not None and same_settings and not self._reload_owed and not needs_reload(old, table):
            commands = runtime_commands(old, table) + retry_after_commands(old, table, self.settings)
            if commands and self.runtime is not None:
                self.runtime.execute(commands)
            # Keep the files current too, so a restart of the proxy starts from the same state.
            self.write(table)
            self.current = table
            return "runtime" if commands else "none"
        changed = [name for name in self.write(table) if name != STATE_FILE]
        reloading = bool(changed) or self._reload_owed
        if reloading:
            why = ", ".join(changed) + " changed" if changed else "an earlier reload failed"
            log.info("reloading HAProxy (%s); models: %s", why, ", ".join(table.models))
            self.reload()
        self.current = table
        return "reload" if reloading else "none"

    def reload(self) -> None:
        """Reload HAProxy onto the files on disk; owed until it succeeds, so a failed reload (the master
        CLI not answering yet, a new worker that did not start) is retried by the next apply."""
        self._reload_owed = True
        if self.runtime is not None and self.runtime.master_socket is not None:
            self.runtime.reload()
        self._reload_owed = False
