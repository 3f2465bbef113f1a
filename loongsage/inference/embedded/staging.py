"""Weight updates staged inside a weight-update session, then committed in one step.

A push arrives as several buckets (`/update_weights_from_tensor` or
`/update_weights_from_distributed` requests); only its last one carries `weight_version`.
Applied bucket by bucket, a push that failed half way would leave the model a mix of two
versions. So inside a session every bucket is staged here, beside the live model, and the
bucket that carries a version commits everything staged, together with the version, in one
step on the scheduler thread (between two decode steps). A session that ends with tensors still
staged (the sender failed or gave up) discards them: the old weights and version stay.

Staging takes one copy per tensor at most, committing none: a staged tensor becomes its
parameter's storage (`param.data = staged`), so the Parameter objects (tied weights share one,
memory.py tracks them by id) stay those of the model. A tensor made for the request alone
(`owned`: unpacked or received for it) is kept as it is when it already has the parameter's
dtype and owns exactly its own memory; anything else (another dtype, a view into a larger
buffer, shared memory the sender will free) is copied. q/k/v are views into one fused tensor
per layer (llama.fuse_linears): they are staged straight into a fresh fused tensor, and any of
the three a push leaves out is copied from the live one at commit.

Spares (ping-pong): the storages a commit swaps out are not freed but kept, one per parameter
(and per fused q/k/v tensor), and the next push stages into them. A push then costs one copy
into memory already touched: no fresh allocation per push (a page fault with zeroing per 4 KiB
page, ~540 MB for SmolLM2-135M in fp32) and no freeing of the old weights at the commit. The
price: from the first commit on, the engine holds a second copy of its weights (which a push
needs at its peak anyway, staging beside the live model). `keep_spares=False` frees them at
every commit instead; `drop_spares` frees them now (a release of the weights for a colocated
trainer does). A tensor a request hands over as `owned` may be kept as its parameter's storage,
and later become a spare that a push writes into.

A parameter not loaded since a resume_memory_occupation (memory.py) holds nothing worth keeping
and no request runs until every parameter is loaded again, so it is written in place at once, not
beside: a colocated engine that resumed then needs no second copy of its weights. It still counts
as written only at the commit.

Thread-safe: requests stage from HTTP worker threads while the scheduler commits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
from torch import nn

from loongsage.inference.embedded.llama import LlamaModel
from loongsage.inference.embedded.weights import check_shapes
from loongsage.inference.weight_wire.layout import copy_many

PROJECTIONS = ("q_proj", "k_proj", "v_proj")


@dataclass
class _FusedStage:
    """A fresh fused q/k/v weight (or bias) of one attention layer, filled as its parts arrive."""

    attn: nn.Module
    kind: str  # "weight" or "bias"
    buffer: torch.Tensor
    written: set[str] = field(default_factory=set)  # of PROJECTIONS


class StagedWeights:
    def __init__(
        self,
        model: LlamaModel,
        not_loaded: Callable[[nn.Parameter], bool] | None = None,
        keep_spares: bool = True,
    ):
        """`not_loaded(param)`: whether `param` may be written in place; `keep_spares`: keep the
        storages a commit replaces for the next push to stage into (see above)."""
        self.model = model
        self.keep_spares = keep_spares
        self._not_loaded = not_loaded or (lambda param: False)
        self._params = dict(model.named_parameters(remove_duplicate=False))
        # id(q/k/v parameter) -> (attention module, "weight" | "bias", projection, row range in the fused tensor)
        self._fused: dict[int, tuple[nn.Module, str, str, slice]] = {}
        for layer in model.model.layers:
            attn = layer.self_attn
            for kind in ("weight", "bias"):
                if getattr(attn, f"fused_{kind}", None) is None:
                    continue
                start = 0
                for proj in PROJECTIONS:
                    param = getattr(getattr(attn, proj), kind)
                    self._fused[id(param)] = (attn, kind, proj, slice(start, start + param.shape[0]))
                    start += param.shape[0]
        self._lock = threading.Lock()
        self._plain: dict[int, tuple[nn.Parameter, torch.Tensor]] = {}  # id(param) -> (param, its next data)
        self._in_place: set[int] = set()  # ids of parameters not loaded since a resume, written already
        self._fused_stages: dict[tuple[int, str], _FusedStage] = {}
        self._names: set[str] = set()
        # Buffers of a parameter's shape and dtype that nothing else uses (see Spares above).
        self._spares: dict[int, torch.Tensor] = {}  # id(param) -> buffer
        self._fused_spares: dict[tuple[int, str], torch.Tensor] = {}  # (id(attention), kind) -> buffer
        self.allocations = 0  # buffers staging had to allocate (none once spares are there): tests and info

    @property
    def count(self) -> int:
        """Tensors staged (by name) and not yet committed. Read without the lock, which a bucket
        being copied may hold a while: /server_info answers from the event loop."""
        return len(self._names)

    @property
    def spare_bytes(self) -> int:
        """Memory held in spares. Read without the lock (server_info answers on the event loop)."""
        spares = [*list(self._spares.values()), *list(self._fused_spares.values())]
        return sum(t.numel() * t.element_size() for t in spares)

    def stage(
        self,
        named: Iterable[tuple[str, torch.Tensor]],
        owned: bool = False,
        check: Callable[[], None] | None = None,
        copy_threads: int = 1,
    ) -> int:
        """Stage every tensor of a bucket, or (WeightError for a name or shape) none. `check` runs
        first, under the same lock as `discard`, so that nothing is staged past a release that
        discards. A name staged twice keeps the later tensor. `copy_threads`: threads copying the
        bucket in (`layout.copy_many`), for a sender that knows no other copy competes. Returns
        how many were staged."""
        named = list(named)
        check_shapes(self.model, [(name, tensor.shape) for name, tensor in named], self._params)
        # A parameter given twice (a name repeated, or both names of tied weights) keeps the later
        # tensor: only that one is written, so no two of the copies below write the same memory.
        last = {id(self._params[name]): index for index, (name, _) in enumerate(named)}
        copies: list[tuple[torch.Tensor, torch.Tensor]] = []  # (staged buffer, tensor), made together at the end
        with self._lock:
            if check is not None:
                check()
            for index, (name, tensor) in enumerate(named):
                self._names.add(name)
                param = self._params[name]
                if last[id(param)] != index:
                    continue
                fused = self._fused.get(id(param))
                if self._not_loaded(param):
                    with torch.no_grad():
                        param.copy_(tensor)  # a q/k/v view writes into the live fused tensor
                    self._in_place.add(id(param))
                    self._plain.pop(id(param), None)  # defensive: releasing the weights discards what was staged
                    if fused is not None and (stage := self._fused_stages.get((id(fused[0]), fused[1]))):
                        stage.written.discard(fused[2])
                elif fused is None:
                    if (earlier := self._plain.pop(id(param), None)) is not None:  # staged twice: keep the later
                        self._spare(param, earlier[1])
                    if owned and _keepable(tensor, param):
                        data = tensor.detach()
                    else:
                        data = self._take(param)
                        copies.append((data, tensor))
                    self._plain[id(param)] = (param, data)
                else:
                    attn, kind, proj, rows = fused
                    stage = self._fused_stages.get((id(attn), kind))
                    if stage is None:
                        buffer = self._fused_spares.pop((id(attn), kind), None)
                        if buffer is None:
                            buffer = torch.empty_like(getattr(attn, f"fused_{kind}"))
                            self.allocations += 1
                        stage = self._fused_stages[(id(attn), kind)] = _FusedStage(attn, kind, buffer)
                    copies.append((stage.buffer[rows], tensor))
                    stage.written.add(proj)
            copy_many(copies, copy_threads)
        return len(named)

    def commit(self) -> tuple[set[int], int]:
        """Make every staged tensor its parameter's data; call it on the scheduler thread. Returns
        the ids of the parameters written and how many tensors (by name) were committed."""
        with self._lock:
            swaps: list[tuple[nn.Parameter, torch.Tensor]] = [pair for pair in self._plain.values()]
            fused: list[tuple[nn.Module, str, torch.Tensor]] = []
            written = {id(param) for param, _ in swaps} | self._in_place
            for stage in self._fused_stages.values():
                attn, kind, buffer = stage.attn, stage.kind, stage.buffer
                live = getattr(attn, f"fused_{kind}")
                for proj in PROJECTIONS:
                    param = getattr(getattr(attn, proj), kind)
                    rows = self._fused[id(param)][3]
                    if proj in stage.written:
                        written.add(id(param))
                    else:  # left out of this push (or written in place): its live values carry over
                        buffer[rows].copy_(live[rows])
                    swaps.append((param, buffer[rows]))
                fused.append((attn, kind, buffer))
            for param, data in swaps:  # stage() made sure; checked before the first swap all the same
                if data.shape != param.shape or data.dtype != param.dtype:
                    got, want = f"{list(data.shape)} {data.dtype}", f"{list(param.shape)} {param.dtype}"
                    raise AssertionError(f"staged {got} for a {want} parameter")
            if self.keep_spares:  # the storages being replaced: the model's own (loaded, or staged before)
                for param, _ in self._plain.values():
                    old = param.data
                    if old.is_contiguous() and old.storage_offset() == 0:
                        self._spares.setdefault(id(param), old)
            for param, data in swaps:
                param.data = data
            for attn, kind, buffer in fused:
                old = getattr(attn, f"fused_{kind}")
                setattr(attn, f"fused_{kind}", buffer)
                if self.keep_spares:
                    self._fused_spares[(id(attn), kind)] = old
            count = len(self._names)
            self._clear()
        return written, count

    def discard(self) -> int:
        """Drop everything staged (its buffers become spares); returns how many tensors (by name)
        that was."""
        with self._lock:
            count = len(self._names)
            for param, data in self._plain.values():
                self._spare(param, data)
            for key, stage in self._fused_stages.items():
                if self.keep_spares:
                    self._fused_spares.setdefault(key, stage.buffer)
            self._clear()
        return count

    def drop_spares(self) -> int:
        """Free the spares now; returns their bytes."""
        with self._lock:
            freed = self.spare_bytes
            self._spares, self._fused_spares = {}, {}
        return freed

    def _take(self, param: nn.Parameter) -> torch.Tensor:
        """A buffer for `param`'s next data: its spare, else a fresh one."""
        spare = self._spares.pop(id(param), None)
        if spare is not None:
            return spare
        self.allocations += 1
        return torch.empty(param.shape, dtype=param.dtype, device=param.device)

    def _spare(self, param: nn.Parameter, data: torch.Tensor) -> None:
        """Keep `data` (no longer `param`'s, used by nothing else) as `param`'s spare, if it can be one."""
        if self.keep_spares and id(param) not in self._spares and _keepable(data, param):
            self._spares[id(param)] = data.detach()

    def _clear(self) -> None:
        self._plain, self._in_place, self._fused_stages, self._names = {}, set(), {}, set()


def _keepable(tensor: torch.Tensor, param: nn.Parameter) -> bool:
    """Whether `tensor` can become `param`'s storage as it is (or a spare for it)."""
    itemsize = tensor.element_size()
    return (
        type(tensor) in (torch.Tensor, nn.Parameter)
        and tensor.dtype == param.dtype
        and tensor.device == param.device
        and tensor.shape == param.shape
        and tensor.is_contiguous()
        and tensor.storage_offset() == 0
        and tensor.untyped_storage().nbytes() == tensor.numel() * itemsize  # not a view into a larger buffer
        and not tensor.is_shared()  # not the sender's shared memory
        and not tensor.is_inference()
    )


def received_message(received: int, staged: int, committed: int) -> str:
    """The answer's message for one bucket of a session's push (Engine.receive_weights)."""
    if committed:
        return f"updated {committed} tensors"
    return f"staged {received} tensors ({staged} in all), applied with the update that carries weight_version"
