"""A process group of its own for weight updates, beside (never instead of) the default one.

The trainer's rank 0 already belongs to the trainer's default group, and an engine may run its
own; SGLang's `/init_weights_update_group` therefore builds a separate group from a TCP store,
and so do we, on both sides: rank 0 (the sender) hosts the store at `master_address:master_port`,
the engines' ranks join it. The store keys are laid out exactly as SGLang's receiver lays them
out (its `init_custom_process_group`: `PrefixStore(group_name)`, then torch's group helper adds
`<group_name>/` and `<device>/`), or rank 0 and an SGLang rank would each wait for keys the other
never writes (docs/sglang_protocol.md, difference 1).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta

import torch
import torch.distributed as dist

BACKENDS = ("gloo", "nccl")
DEFAULT_TIMEOUT = timedelta(minutes=10)
# Polling a pending broadcast: from 50 us (a small tensor is done at once) doubling to 20 ms, so
# checking adds at most a few percent to a long one.
POLL_FIRST_S, POLL_MAX_S = 50e-6, 0.02


class WeightUpdateGroup:
    """`rank` of `world_size` in the group called `group_name`; rank 0 sends, the others receive."""

    def __init__(
        self,
        backend: str,
        master_address: str,
        master_port: int,
        rank: int,
        world_size: int,
        group_name: str,
        timeout: timedelta = DEFAULT_TIMEOUT,
    ):
        if backend not in BACKENDS:
            raise ValueError(f"weight-update group backend {backend!r} is not one of {', '.join(BACKENDS)}")
        if not 0 <= rank < world_size:
            raise ValueError(f"weight-update group rank {rank} is outside world_size {world_size}")
        self.backend, self.rank, self.world_size, self.group_name = backend, rank, world_size, group_name
        self._pending = None  # a broadcast given up on (see `broadcast`)
        # The store lives as long as the group: rank 0's copy is the server the others talk to.
        self._store = dist.TCPStore(master_address, master_port, world_size, is_master=rank == 0, timeout=timeout)
        prefixed = sglang_group_store(self._store, group_name, backend)
        if backend == "gloo":
            self._group = dist.ProcessGroupGloo(prefixed, rank, world_size, timeout)
        else:
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = timeout
            self._group = dist.ProcessGroupNCCL(prefixed, rank, world_size, options)

    def broadcast(self, tensor: torch.Tensor, src: int = 0, check: Callable[[], None] | None = None) -> None:
        """In place: rank `src` sends `tensor`, every other rank receives into its own.

        `check` is called every few milliseconds while the broadcast is pending; it raises to
        stop waiting (a peer refused its part, say: the broadcast would wait out the timeout).
        The abandoned broadcast stays pending until a peer closes its side, and `close` waits
        for it, since dropping a group with a pending operation blocks until the timeout.
        """
        options = dist.BroadcastOptions()
        options.rootRank = src
        options.rootTensor = 0
        work = self._group.broadcast([tensor], options)
        if check is not None:
            self._pending = work
            pause = POLL_FIRST_S
            # is_completed never blocks; what a timed-out wait(timeout) leaves behind differs by backend.
            while not work.is_completed():
                check()
                time.sleep(pause)
                pause = min(pause * 2, POLL_MAX_S)
            self._pending = None
        work.wait()  # raises what failed it

    def close(self) -> None:
        if self._pending is not None:
            try:
                self._pending.wait()
            except RuntimeError:  # the peer that ended it closed its side: expected
                pass
            self._pending = None
        self._group = None
        self._store = None


def sglang_group_store(store: dist.Store, group_name: str, backend: str) -> dist.Store:
    """The store view SGLang's weight-update group ranks use for `group_name`."""
    device = "cuda" if backend == "nccl" else "cpu"
    return dist.PrefixStore(f"{device}/", dist.PrefixStore(f"{group_name}/", dist.PrefixStore(group_name, store)))
