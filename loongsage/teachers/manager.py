"""The Teacher Manager: any number of named teachers scored through a fixed number of resident
engine slots (`max_resident`), so the teacher count is bounded by host storage, not by the
memory the engines hold.

A teacher that is not resident waits where its loader keeps it (`loaders.py`: as files on disk,
or in host memory) and is swapped into a slot when its samples come. A scoring call groups its
samples by teacher so that each swap serves a whole group, runs the teachers already resident
first (no swap), and assigns the others to the slot used longest ago. With a free slot the next
teacher is loaded there while the current one scores; with one slot the loader is told what
comes next instead (the disk loader reads its files ahead into the page cache). Every answer
carries the weight version it was made under, and a score made by any weights but its
teacher's fails (`scoring.score_batch`).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from loongsage.inference.client import EngineClient
from loongsage.teachers.loaders import DiskLoader, TeacherLoader
from loongsage.teachers.scoring import ScoreRequest, TeacherScores, score_batch
from loongsage.teachers.teacher import Teacher

log = logging.getLogger(__name__)


@dataclass
class TeacherStats:
    swaps: int = 0
    swap_s: float = 0.0
    score_s: float = 0.0
    scored: dict[str, int] = field(default_factory=dict)  # teacher -> samples


class TeacherManager:
    """`slots`: one engine client per resident slot (`teachers.max_resident` engines), whatever
    weights they serve now; `resident`: the teachers the slots started with, slot by slot (their
    engines were launched on those teachers' weights, labelled with their names). `top_k`: how
    many of the teacher's most likely tokens each scored position returns (0: only the sampled
    token's logprob, for PG-style distillation). `loader`: how a teacher gets into a slot
    (teachers.offload; the slots load its files from disk by default)."""

    def __init__(
        self,
        teachers: Sequence[Teacher],
        slots: Sequence[EngineClient],
        top_k: int = 0,
        resident: Sequence[str] = (),
        loader: TeacherLoader | None = None,
    ):
        names = [t.name for t in teachers]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"teachers named twice: {', '.join(twice)}")
        if not slots:
            raise ValueError("the teacher manager needs at least one engine slot (teachers.max_resident >= 1)")
        self.teachers = {t.name: t for t in teachers}
        self.slots = list(slots)
        self.top_k = top_k
        self.loader = loader or DiskLoader()
        self.stats = TeacherStats()
        if len(resident) > len(self.slots) or set(resident) - set(self.teachers):
            raise ValueError(
                f"resident teachers {list(resident)} do not fit {len(self.slots)} slot(s) of {sorted(self.teachers)}"
            )
        # slot index -> teacher it holds, least recently used first
        self._resident: OrderedDict[int, str] = OrderedDict(enumerate(resident))
        self._loader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="teacher-load")

    def resident(self) -> list[str]:
        return [self._resident[slot] for slot in sorted(self._resident)]

    def score(self, requests: Sequence[ScoreRequest]) -> list[TeacherScores]:
        """Every request's scores, in request order."""
        unknown = sorted({r.teacher for r in requests} - set(self.teachers))
        if unknown:
            raise ValueError(f"no teacher named {', '.join(map(repr, unknown))}; teachers: {', '.join(sorted(self.teachers))}")
        groups: dict[str, list[int]] = {}
        for index, request in enumerate(requests):
            groups.setdefault(request.teacher, []).append(index)
        order = self._order(list(groups))
        results: list[TeacherScores | None] = [None] * len(requests)
        pending: Future | None = None
        for position, name in enumerate(order):
            slot = pending.result() if pending is not None else self._make_resident(name)
            following = order[position + 1] if position + 1 < len(order) else None
            pending = self._prefetch(following, busy=slot) if following else None
            started = time.perf_counter()
            batch = [requests[i] for i in groups[name]]
            for index, scores in zip(groups[name], score_batch(self.slots[slot], batch, self.top_k, name)):
                results[index] = scores
            self.stats.score_s += time.perf_counter() - started
            self.stats.scored[name] = self.stats.scored.get(name, 0) + len(batch)
        return results

    def close(self) -> None:
        self._loader.shutdown(wait=True)

    # ------------------------------------------------------------------ residency

    def _order(self, names: list[str]) -> list[str]:
        """Resident teachers first (they cost no swap), then the others in the order asked."""
        held = set(self._resident.values())
        return [n for n in names if n in held] + [n for n in names if n not in held]

    def _prefetch(self, name: str, busy: int) -> Future | None:
        """While slot `busy` scores: the next teacher loaded into a free or idle slot if there is
        one (its future gives the slot); with none, the loader told it comes next (the disk
        loader reads its files ahead), and it is swapped in once `busy` is done (None)."""
        if self._slot_of(name) is not None:
            return None
        if not self._idle_slots(busy):
            self.loader.read_ahead(self.teachers[name])
            return None
        return self._loader.submit(self._make_resident, name, busy)

    def _make_resident(self, name: str, busy: int | None = None) -> int:
        slot = self._slot_of(name)
        if slot is None:
            slot = self._victim(busy)
            started = time.perf_counter()
            self._resident.pop(slot, None)
            self.loader.load(self.slots[slot], self.teachers[name])
            self._resident[slot] = name
            self.stats.swaps += 1
            self.stats.swap_s += time.perf_counter() - started
            log.info("teacher %s swapped into slot %d (%.2f s)", name, slot, time.perf_counter() - started)
        self._resident.move_to_end(slot)
        return slot

    def _slot_of(self, name: str) -> int | None:
        return next((slot for slot, held in self._resident.items() if held == name), None)

    def _idle_slots(self, busy: int | None) -> list[int]:
        empty = [s for s in range(len(self.slots)) if s not in self._resident]
        used = [s for s in self._resident if s != busy]  # least recently used first
        return empty + used

    def _victim(self, busy: int | None) -> int:
        idle = self._idle_slots(busy)
        return idle[0] if idle else busy
