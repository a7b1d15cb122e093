"""How kopf watches: server-side label selectors, timeouts, and a fast reconnect.

kopf's default retry of a failed API request backs off 1, 1, 2, 3, 5, 8, 13, 21 s, so after an
apiserver restart a watch could stay down for ~20 s and a spec change would go unseen that
long. Watches here retry every second, forever (they are the operator's eyes), and children
are filtered by the apiserver (``labelSelector``), not after transfer.
"""

from __future__ import annotations

from collections.abc import Iterator

import kopf

from glm_operator.render import names

MANAGED_SELECTOR = f"{names.LABEL_MANAGED_BY}={names.MANAGED_BY}"


class ReconnectBackoffs:
    """Re-iterable retry delays for kopf: 0.5 s, then 1 s forever (never escalate)."""

    def __iter__(self) -> Iterator[float]:
        yield 0.5
        while True:
            yield 1.0


def configure_watching(settings: kopf.OperatorSettings) -> None:
    settings.posting.enabled = False  # we post our own Events, with reasons users can act on
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 3
    settings.watching.inactivity_timeout = 70
    settings.networking.request_timeout = 60
    settings.networking.connect_timeout = 3
    settings.networking.error_backoffs = ReconnectBackoffs()
    for resource in (
        ("apps", "v1", "deployments"),
        ("v1", "services"),
        ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets"),
    ):
        settings.watching.label_selectors[resource] = MANAGED_SELECTOR
