"""One weight update across every receiver, however many senders feed each of them.

One process coordinates it (`rounds.run_update_round`: TrainGroup in the controller, or the one
process that pushes); the senders (the trainer ranks that are sources, the relays) only move
buckets, carrying no version and opening no session. That is what lets an engine take its
shares from several senders at once (two trainer ranks, or a relay per NIC on its host, each
bringing one share), and it puts the version switch in one place:

1. every engine's weight-update session is opened (SGLang 0.5.23 refuses updates outside one);
   every relay's forwarding is opened (a relay's session);
2. every source runs its routes (`source_routes.send_routes`, on each source rank at once);
3. the relays are closed upstream first, so each has forwarded all it got before the next one is
   asked; each answers with the engines it could not reach;
4. every engine that got all of its routes is committed: an update with no tensors that carries
   the version, after which it serves the new weights (our engines apply what they staged in one
   step; SGLang, which loads in place, takes the version label);
5. every session is closed; SGLang finalizes the loaded weights there, so an engine whose session
   does not close did not get them either. An engine not committed discards what it staged and
   keeps its old weights and version (SGLang keeps the old label on partly loaded weights, so the
   router sees it lag and keeps it out of rotation until a later push reaches it).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from loongsage.inference.client import EngineClient, EngineError
from loongsage.transfer.ipc_bucket import IpcBucket
from loongsage.transfer.session import begin_session

log = logging.getLogger(__name__)

TIMEOUT_S = 600.0


class UpdateRound:
    """`engines`, `relays`: URLs; relays in upstream-first order (a relay before the relays it feeds)."""

    def __init__(self, engines: Sequence[str], relays: Sequence[str] = ()):
        self.engines = {url: EngineClient(url, timeout=TIMEOUT_S) for url in engines}
        self.relays = {url: EngineClient(url, timeout=TIMEOUT_S) for url in relays}
        self.failed: dict[str, str] = {}  # engine or relay URL -> why it is out of this round
        self._in_session: list[EngineClient] = []

    def open(self) -> None:
        for client in [*self.engines.values(), *self.relays.values()]:
            try:
                if begin_session(client):
                    self._in_session.append(client)
            except EngineError as exc:
                self.failed[client.base_url] = f"opening its weight-update session: {exc}"

    def close_relays(self) -> dict[str, str]:
        """Each relay, once it has forwarded everything: the engines it could not reach, with why."""
        unreached: dict[str, str] = {}
        for url, client in self.relays.items():
            if client not in self._in_session:
                continue
            self._in_session.remove(client)
            try:
                answer = client.end_weight_update()
            except EngineError as exc:
                self.failed.setdefault(url, f"closing its forwarding: {exc}")
                continue
            for engine, why in (answer.get("failed") or {}).items():
                unreached[engine] = f"through relay {url}: {why}"
        return unreached

    def commit(self, version: int | str, engines: Sequence[str]) -> None:
        """The version switch on `engines` (those that got every route); a refusal fails the engine.
        `version`: the trainer's step, or a teacher's name (teachers/store.py)."""
        for url in engines:
            client = self.engines[url]
            if url in self.failed:
                continue
            try:
                tp_size = client.get_server_info().get("tp_size", 1)
                client.update_weights_from_tensor(
                    serialized_named_tensors=[_EMPTY] * tp_size, load_format=None, flush_cache=True, weight_version=str(version)
                )
            except EngineError as exc:
                self.failed[url] = f"committing version {version}: {exc}"

    def close(self) -> None:
        for client in self._in_session:
            try:
                client.end_weight_update()
            except EngineError as exc:
                log.warning("closing the weight-update session of %s failed: %s", client.base_url, exc)
                self.failed.setdefault(client.base_url, f"closing its weight-update session: {exc}")
        self._in_session = []
        for client in [*self.engines.values(), *self.relays.values()]:
            client.close()


# SGLang's own payload for "no tensors": what every receiver decodes (a pickled empty list).
_EMPTY = IpcBucket([]).serialize()
