"""The weight-update session around a push: SGLang 0.5.23 refuses /update_weights_from_tensor
and /update_weights_from_distributed (HTTP 400) unless /begin_weight_update came first, and
finalizes the loaded weights at /end_weight_update. The update round (`update_round`) opens and
closes every engine's session through `begin_session`, whatever transports feed the engine;
`update_sessions` does the same around a block, for callers that post updates themselves.

A server holds one session at a time. One left open by a sender that died mid-push would refuse
every later push ("already open"): it is closed and ours opened, since only one trainer pushes
to an engine. A server without the endpoints (404: SGLang before sessions) is pushed to without one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from loongsage.inference.client import EngineClient, EngineError

log = logging.getLogger(__name__)


@contextmanager
def update_sessions(clients: Sequence[EngineClient]) -> Iterator[None]:
    """Open a session on every engine, run the block, close every session opened, also when the
    block fails. A failure to close is raised only when the block succeeded (the push's own
    error says more); a failure to open closes the sessions already opened."""
    opened: list[EngineClient] = []
    failed = True
    try:
        for client in clients:
            if begin_session(client):
                opened.append(client)
        yield
        failed = False
    finally:
        _end_all(opened, raise_errors=not failed)


def begin_session(client: EngineClient) -> bool:
    """Open one; False when the server has no sessions (SGLang before 0.5.23)."""
    try:
        client.begin_weight_update()
        return True
    except EngineError as exc:
        if exc.status == 404:
            return False
        if exc.status != 400 or "already open" not in exc.server_message:
            raise
    log.warning("%s: a weight-update session was left open (by a push that died?); closing it", client.base_url)
    client.end_weight_update()
    client.begin_weight_update()
    return True


def _end_all(clients: list[EngineClient], raise_errors: bool) -> None:
    first: EngineError | None = None
    for client in clients:  # every one, whatever the others answer
        try:
            client.end_weight_update()
        except EngineError as exc:
            log.warning("closing the weight-update session failed: %s", exc)
            first = first or exc
    if first is not None and raise_errors:
        raise first
