"""Giving the engine's memory back and taking it again, for a trainer colocated on the same
machine (SGLang's /release_memory_occupation and /resume_memory_occupation).

Tags as SGLang names them: "weights" (parameter storages), "kv_cache" (KV slots and the prompt
cache), "cuda_graph" (nothing on CPU; accepted so that one caller serves both engines).
Everything here runs on the scheduler thread (through `Scheduler.call`), between two steps.
"""

from __future__ import annotations

import ctypes
import logging
import mmap

import torch

from loongsage.inference.embedded.llama import LlamaModel
from loongsage.inference.embedded.protocol import BadRequest
from loongsage.inference.embedded.scheduler import Scheduler, Unavailable

log = logging.getLogger(__name__)

TAGS = ("weights", "kv_cache", "cuda_graph")


def parse_tags(value) -> tuple[str, ...]:
    """The request's `tags`: null means every tag."""
    if value is None:
        return TAGS
    if not isinstance(value, list) or not all(isinstance(tag, str) for tag in value):
        raise BadRequest(f"expected a list of strings or null, got {value!r}", "tags")
    unknown = [tag for tag in value if tag not in TAGS]
    if unknown:
        raise BadRequest(f"unknown tag {unknown[0]!r} (known: {list(TAGS)})", "tags")
    return tuple(dict.fromkeys(value))


class MemoryOccupation:
    def __init__(self, model: LlamaModel, scheduler: Scheduler):
        self.model, self.scheduler = model, scheduler
        self.released: set[str] = set()
        self._storages: list[tuple[torch.UntypedStorage, int]] = []  # with their sizes while released
        self._missing: dict[int, str] = {}  # id(parameter) -> name: not written since the resume

    def release(self, tags: tuple[str, ...]) -> None:
        """Refused (400) while any request runs or waits: freeing weights under a decode step would
        crash it, and a paused request expects to continue on the weights it started with."""
        in_flight = self.scheduler.refuse_if_idle(self._refusal(self.released | set(tags)))
        if in_flight:
            raise BadRequest(
                f"{in_flight} request(s) in flight (running, paused or queued): abort them or let them finish "
                "before releasing memory",
                "tags",
            )
        if "weights" in tags and "weights" not in self.released:
            self._release_weights()
        if "kv_cache" in tags:
            self.scheduler.cache.release()
            self.scheduler.prompts.clear()
        self.released |= set(tags)
        trim_heap()

    def resume(self, tags: tuple[str, ...]) -> None:
        """Weights come back with undefined contents (as with SGLang's memory saver): generation
        stays refused until weight updates have written every parameter again. The KV cache
        grows back as sequences need it."""
        if "weights" in tags and "weights" in self.released:
            self._resume_weights()
        self.released -= set(tags)
        self.scheduler.refuse(self._refusal(self.released))

    def check_writable(self) -> None:
        if "weights" in self.released:
            raise Unavailable("weights released: POST /resume_memory_occupation before updating weights")

    def mark_written(self, param_ids: set[int]) -> None:
        """Every weight update passes here after writing (Engine.update_weights)."""
        if self._missing:
            for pid in param_ids:
                self._missing.pop(pid, None)
            self.scheduler.refuse(self._refusal(self.released))

    def not_loaded(self, param: torch.nn.Parameter) -> bool:
        """Whether `param` has not been written since a resume: it holds nothing worth keeping,
        and generation stays refused until it is written (staging may write it in place)."""
        return id(param) in self._missing  # one dict lookup: safe from any thread

    def info(self) -> dict:
        return {"memory_released": sorted(self.released), "weights_not_loaded": len(self._missing)}

    def _release_weights(self) -> None:
        # One storage can back several parameters (tied embeddings, the q/k/v views into the fused
        # projection): each is freed once, and the views stay attached to it for the resume.
        unique: dict[int, torch.UntypedStorage] = {}
        for param in self.model.parameters():
            storage = param.untyped_storage()
            if storage.nbytes():
                unique.setdefault(storage.data_ptr(), storage)
        self._storages = [(storage, storage.nbytes()) for storage in unique.values()]
        for storage, nbytes in self._storages:
            _discard_pages(storage.data_ptr(), nbytes)
            storage.resize_(0)
        log.info("released %d weight storages (%.1f MB)", len(self._storages), sum(n for _, n in self._storages) / 2**20)

    def _resume_weights(self) -> None:
        for storage, nbytes in self._storages:
            storage.resize_(nbytes)
            # Zeroed so that the pages are really resident again, as resuming on a GPU reserves
            # them: running out of memory shows here rather than halfway through the next update.
            torch.empty(0, dtype=torch.uint8).set_(storage).zero_()
        self._storages = []
        self._missing = {id(p): name for name, p in self.model.named_parameters()}

    def _refusal(self, released: set[str]) -> str | None:
        """Why generation is refused in this state (HTTP 503), or None."""
        if "weights" in released:
            return "weights released: POST /resume_memory_occupation, then update the weights"
        if "kv_cache" in released:
            return "kv_cache released: POST /resume_memory_occupation first"
        if self._missing:
            total = sum(1 for _ in self.model.parameters())
            example = next(iter(self._missing.values()))
            return (
                f"{len(self._missing)} of {total} parameters not loaded since resume_memory_occupation "
                f"(e.g. {example}): update the weights first"
            )
        return None


def _libc():
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:  # not glibc
        return None


_LIBC = _libc()
_MADV_DONTNEED = 4  # Linux


def _discard_pages(address: int, nbytes: int) -> None:
    """Hand the whole pages inside a block back to the kernel before freeing it. Freeing alone
    does not: glibc keeps the top of a thread's arena (the loader thread's, where the weights
    were allocated) resident up to its trim threshold, which grows to 64 MB, and malloc_trim
    leaves arena tops alone (measured: ~4 MB of a 128 MB model stayed resident). Only pages
    wholly inside the block are touched, never the allocator's chunk headers around it."""
    start = -(-address // mmap.PAGESIZE) * mmap.PAGESIZE
    end = (address + nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
    if _LIBC is None or end <= start:
        return
    if _LIBC.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), _MADV_DONTNEED) != 0:
        log.warning("madvise(MADV_DONTNEED) failed: errno %d; the memory returns when the allocator frees it", ctypes.get_errno())


def trim_heap() -> None:
    """Freed blocks below glibc's mmap threshold stay in the heap, counted as resident, until
    trimmed. Other C libraries (musl, macOS) have no malloc_trim: memory returns when they decide."""
    trim = getattr(_LIBC, "malloc_trim", None)
    if trim is not None:
        trim(0)
