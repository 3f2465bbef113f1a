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

PROJECTIONS = ("q_proj", "k_proj", "v_proj")


@dataclass
class _FusedStage:
    """A fresh fused q/k/v weight (or bias) of one attention layer, filled as its parts arrive."""

    attn: nn.Module
    kind: str  # "weight" or "bias"
    buffer: torch.Tensor
    written: set[str] = field(default_factory=set)  # of PROJECTIONS


class StagedWeights:
    def __init__(self, model: LlamaModel, not_loaded: Callable[[nn.Parameter], bool] | None = None):
        """`not_loaded(param)`: whether `param` may be written in place (see above)."""
        self.model = model
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

    @property
    def count(self) -> int:
        """Tensors staged (by name) and not yet committed. Read without the lock, which a bucket
        being copied may hold a while: /server_info answers from the event loop."""
        return len(self._names)

    def stage(
        self, named: Iterable[tuple[str, torch.Tensor]], owned: bool = False, check: Callable[[], None] | None = None
    ) -> int:
        """Stage every tensor of a bucket, or (WeightError for a name or shape) none. `check` runs
        first, under the same lock as `discard`, so that nothing is staged past a release that
        discards. A name staged twice keeps the later tensor. Returns how many were staged."""
        named = list(named)
        check_shapes(self.model, [(name, tensor.shape) for name, tensor in named])
        with self._lock:
            if check is not None:
                check()
            for name, tensor in named:
                param = self._params[name]
                fused = self._fused.get(id(param))
                if self._not_loaded(param):
                    with torch.no_grad():
                        param.copy_(tensor)  # a q/k/v view writes into the live fused tensor
                    self._in_place.add(id(param))
                    self._plain.pop(id(param), None)  # defensive: releasing the weights discards what was staged
                    if fused is not None and (stage := self._fused_stages.get((id(fused[0]), fused[1]))):
                        stage.written.discard(fused[2])
                elif fused is None:
                    self._plain[id(param)] = (param, _own(tensor, param) if owned else _copy(tensor, param))
                else:
                    attn, kind, proj, rows = fused
                    stage = self._fused_stages.get((id(attn), kind))
                    if stage is None:
                        live = getattr(attn, f"fused_{kind}")
                        stage = self._fused_stages[(id(attn), kind)] = _FusedStage(attn, kind, torch.empty_like(live))
                    with torch.no_grad():
                        stage.buffer[rows].copy_(tensor)
                    stage.written.add(proj)
                self._names.add(name)
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
            for param, data in swaps:
                param.data = data
            for attn, kind, buffer in fused:
                setattr(attn, f"fused_{kind}", buffer)
            count = len(self._names)
            self._clear()
        return written, count

    def discard(self) -> int:
        """Drop everything staged; returns how many tensors (by name) that was."""
        with self._lock:
            count = len(self._names)
            self._clear()
        return count

    def _clear(self) -> None:
        self._plain, self._in_place, self._fused_stages, self._names = {}, set(), {}, set()


def _own(tensor: torch.Tensor, param: nn.Parameter) -> torch.Tensor:
    """`tensor` itself when it can become `param`'s storage as it is, else a copy."""
    itemsize = tensor.element_size()
    if (
        type(tensor) is torch.Tensor
        and tensor.dtype == param.dtype
        and tensor.device == param.device
        and tensor.is_contiguous()
        and tensor.storage_offset() == 0
        and tensor.untyped_storage().nbytes() == tensor.numel() * itemsize  # not a view into a larger buffer
        and not tensor.is_shared()  # not the sender's shared memory
        and not tensor.is_inference()
    ):
        return tensor.detach()
    return _copy(tensor, param)


def _copy(tensor: torch.Tensor, param: nn.Parameter) -> torch.Tensor:
    out = torch.empty(param.shape, dtype=param.dtype, device=param.device)
    with torch.no_grad():
        out.copy_(tensor)
    return out


def received_message(received: int, staged: int, committed: int) -> str:
    """The answer's message for one bucket of a session's push (Engine.receive_weights)."""
    if committed:
        return f"updated {committed} tensors"
    return f"staged {received} tensors ({staged} in all), applied with the update that carries weight_version"
