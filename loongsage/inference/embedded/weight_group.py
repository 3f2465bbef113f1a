"""The engine's side of SGLang's distributed weight update: weight-update groups by name.

`/init_weights_update_group` joins a group as rank `rank_offset` (this engine has one
tensor-parallel rank), `/update_weights_from_distributed` receives one bucket by broadcast from
rank 0 and stages it all-or-nothing (committed with the push's bucket that carries
`weight_version`, see `staging`), `/destroy_weights_update_group` leaves.

A refused update consumes no broadcast: every field, and every name and shape against the
model, is checked before the first byte is received. The group is then still in step with a
sender that did not broadcast for that request (a test's, or a sender that reads answers
before sending); a sender that was already broadcasting is left waiting on this rank, so it
must give the group up (destroying it here is what ends its wait). A failure while receiving
(the sender went away) leaves the group half-way through a bucket: it is destroyed on the
spot, the model untouched, and the error says so.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import torch

from loongsage.inference.embedded.protocol import BadRequest
from loongsage.inference.embedded.staging import received_message
from loongsage.inference.embedded.weights import WeightError, check_shapes
from loongsage.inference.weight_wire.layout import DTYPES
from loongsage.inference.weight_wire.process_group import WeightUpdateGroup

BACKEND = "gloo"  # what a CPU engine can join
PORTS = range(1, 65536)


class GroupFailed(RuntimeError):
    """The group itself failed (rendezvous, a broken connection): not the request's fault."""


@dataclass
class _Member:
    group: WeightUpdateGroup | None = None  # None while joining
    busy: threading.Lock = field(default_factory=threading.Lock)  # held while receiving
    destroyed: bool = False  # destroyed while busy: the receiving thread closes it


class WeightGroups:
    """The groups one engine belongs to. Every method blocks (the HTTP layer runs them on a
    worker thread) and raises BadRequest for a bad body, GroupFailed for a failed group,
    scheduler.Unavailable for an update while the weights are released."""

    def __init__(self, engine, join=WeightUpdateGroup):
        self._engine = engine
        self._join = join
        self._members: dict[str, _Member] = {}
        self._lock = threading.Lock()

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._members)

    def init(self, body) -> dict:
        """Returns once every rank has joined (the sender joins as rank 0 meanwhile)."""
        address = _text(body, "master_address")
        port = _integer(body, "master_port", PORTS)
        world_size = _integer(body, "world_size", range(2, 2**31))
        rank = _integer(body, "rank_offset", range(1, world_size))
        name = _text(body, "group_name")
        backend = _text(body, "backend")
        if backend != BACKEND:
            reason = "this engine runs on CPU and has no NCCL" if backend == "nccl" else "unknown backend"
            raise BadRequest(f"backend {backend!r}: {reason}; use {BACKEND!r}", "backend")
        with self._lock:  # the name is taken from here on, so a concurrent init with it is refused too
            if name in self._members:
                raise BadRequest(f"a weight-update group named {name!r} already exists", "group_name")
            member = self._members[name] = _Member()
        try:
            group = self._join(backend, address, port, rank, world_size, name)
        except Exception as exc:
            with self._lock:
                self._members.pop(name, None)
            raise GroupFailed(f"joining weight-update group {name!r} at {address}:{port} failed: {exc}") from exc
        with self._lock:
            member.group = group
            if self._members.get(name) is not member:  # destroyed while joining
                group.close()
                raise GroupFailed(f"weight-update group {name!r} was destroyed while joining")
        return {"success": True, "message": f"joined weight-update group {name!r} as rank {rank} of {world_size}"}

    def update(self, body, weight_version: str | None) -> dict:
        names, dtypes, shapes = _tensor_specs(body)
        name = _text(body, "group_name")
        if body.get("load_format") is not None:
            # SGLang's "flattened_bucket" is one uint8 broadcast; receiving per tensor would wait
            # for broadcasts that never come, until the group times out.
            format_ = body["load_format"]
            raise BadRequest(f"load_format={format_!r}: only per-tensor broadcasts (null) are received", "load_format")
        member = self._member(name)
        # Refusals the update itself would give, given before receiving (see the module's docstring).
        self._engine.memory.check_writable()
        try:
            check_shapes(self._engine.model, zip(names, shapes))
        except WeightError as exc:
            field_name = "shapes" if exc.kind == "shape" else "names"
            raise BadRequest(f"{exc} (nothing was received)", field_name) from None
        with member.busy:
            if member.destroyed or member.group is None:
                raise BadRequest(f"weight-update group {name!r} is gone or not joined yet", "group_name")
            received = self._receive(name, member, names, dtypes, shapes)
        try:  # staged until the push's bucket that carries weight_version commits (Engine.receive_weights)
            staged, committed = self._engine.receive_weights(received, weight_version, owned=True)
        except WeightError as exc:  # checked above; the model changed in between
            raise BadRequest(str(exc), "shapes" if exc.kind == "shape" else "names") from None
        message = received_message(len(received), staged, committed)
        return {"success": True, "message": message, "weight_version": self._engine.weight_version}

    def destroy(self, body) -> dict:
        name = _text(body, "group_name")
        with self._lock:
            member = self._members.pop(name, None)
        if member is None:
            raise BadRequest(f"no weight-update group named {name!r}", "group_name")
        member.destroyed = True
        if member.busy.acquire(blocking=False):
            try:
                if member.group is not None:
                    member.group.close()
            finally:
                member.busy.release()
        # Else a receive is pending: it ends when the sender closes its side, then closes the group.
        return {"success": True, "message": f"destroyed weight-update group {name!r}"}

    def _member(self, name: str) -> _Member:
        with self._lock:
            member = self._members.get(name)
        if member is None:
            raise BadRequest(f"no weight-update group named {name!r}", "group_name")
        return member

    def _receive(self, name: str, member: _Member, names, dtypes, shapes) -> list[tuple[str, torch.Tensor]]:
        received = []
        for index, (tensor_name, dtype, shape) in enumerate(zip(names, dtypes, shapes)):
            tensor = torch.empty(shape, dtype=DTYPES[dtype])
            try:
                member.group.broadcast(tensor, src=0)
            except Exception as exc:
                self._drop(name, member)
                raise GroupFailed(
                    f"weight-update group {name!r} failed receiving {tensor_name!r} ({index + 1} of {len(names)}): "
                    f"{exc}; the group is destroyed and the model unchanged"
                ) from exc
            received.append((tensor_name, tensor))
        if member.destroyed:
            member.group.close()
        return received

    def _drop(self, name: str, member: _Member) -> None:
        with self._lock:
            if self._members.get(name) is member:
                del self._members[name]
        member.destroyed = True
        member.group.close()


def _tensor_specs(body) -> tuple[list[str], list[str], list[list[int]]]:
    names = _list(body, "names")
    dtypes = _list(body, "dtypes")
    shapes = _list(body, "shapes")
    if not names:
        raise BadRequest("expected at least one tensor", "names")
    for key, values in (("dtypes", dtypes), ("shapes", shapes)):
        if len(values) != len(names):
            raise BadRequest(f"{len(values)} {key} for {len(names)} names", key)
    for index, (name, dtype, shape) in enumerate(zip(names, dtypes, shapes)):
        if not isinstance(name, str) or not name:
            raise BadRequest(f"names[{index}]: expected a parameter name, got {name!r}", "names")
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise BadRequest(f"dtypes[{index}] ({name}): {dtype!r} is not one of {sorted(DTYPES)}", "dtypes")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise BadRequest(f"shapes[{index}] ({name}): expected a list of sizes, got {shape!r}", "shapes")
    return names, dtypes, shapes


def _field(body, name: str):
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object", "body")
    if body.get(name) is None:
        raise BadRequest(f"{name!r} is required", name)
    return body[name]


def _text(body, name: str) -> str:
    value = _field(body, name)
    if not isinstance(value, str) or not value:
        raise BadRequest(f"expected a non-empty string, got {value!r}", name)
    return value


def _integer(body, name: str, allowed: range) -> int:
    value = _field(body, name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadRequest(f"expected an integer, got {type(value).__name__}", name)
    if value not in allowed:
        raise BadRequest(f"{value} is outside [{allowed.start}, {allowed.stop - 1}]", name)
    return value


def _list(body, name: str) -> list:
    value = _field(body, name)
    if not isinstance(value, list):
        raise BadRequest(f"expected a list, got {type(value).__name__}", name)
    return value
