"""How a teacher that is not resident gets into an engine slot (`teachers.offload`):

- `DiskLoader` (disk): the slot loads the teacher's safetensors itself
  (`/update_weights_from_disk`, labelled with the teacher's name), so an idle teacher costs page
  cache, not process memory; the next teacher's files can be read ahead while another scores.
- `HostLoader` (host): every teacher is held in host memory by a `TeacherStore` actor (pinned
  where its seat has a GPU) and pushed into the slot by TransferMesh over the transport the
  probed topology gives (`teachers/store.py`): on a GPU node a DMA from pinned memory and CUDA IPC
  instead of a read from the page cache into pageable memory, on a CPU machine shared memory.

Both commit the slot to the teacher's name as its weight version, which every score is checked
against (`scoring.score_batch`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from loongsage.inference.client import EngineClient
from loongsage.teachers.teacher import Teacher


class TeacherLoader(Protocol):
    def load(self, slot: EngineClient, teacher: Teacher) -> None:
        """`teacher`'s weights into `slot`, which serves them as weight version `teacher.name`."""

    def read_ahead(self, teacher: Teacher) -> None:
        """A hint that `teacher` is loaded next, into a slot still busy (may do nothing)."""


class DiskLoader:
    def load(self, slot: EngineClient, teacher: Teacher) -> None:
        slot.update_weights_from_disk(teacher.model_path, weight_version=teacher.name)

    def read_ahead(self, teacher: Teacher) -> None:
        """Ask the kernel to read the teacher's weights into the page cache (no-op where unsupported)."""
        for path in Path(teacher.model_path).glob("*.safetensors"):
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
            except (OSError, AttributeError):
                pass
            finally:
                os.close(fd)


class HostLoader:
    """`store`: a TeacherStore Ray actor holding every teacher (`teachers.store.TeacherStore`)."""

    def __init__(self, store):
        self.store = store

    def load(self, slot: EngineClient, teacher: Teacher) -> None:
        import ray

        ray.get(self.store.push.remote(teacher.name, slot.base_url))

    def read_ahead(self, teacher: Teacher) -> None:
        """Nothing to read: the store holds every teacher in memory already."""
