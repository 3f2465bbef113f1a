"""TeacherStore: every teacher's weights held in host memory by one process, the source of the
pushes that swap a teacher into an engine slot (`teachers.offload=host`).

On a node whose teacher slots have GPUs the tensors are pinned, and the store stands on the
first slot's GPU: TransferMesh's cuda_ipc route then copies each bucket to that GPU by DMA and
the slot reads it there (`transfer.channel`), instead of SGLang reading the files into pageable
memory first. Where there is no GPU (here) it is plain process memory, pushed over shared memory.
The route plan comes from the probed topology like the trainer's (`teacher_transfer_plan.json`),
so slots on other nodes are reached over nccl / gloo.

Host memory grows with the number of teachers (a copy of each); device memory does not.
"""

from __future__ import annotations

import logging

import ray
import torch

from loongsage.inference.embedded.weights import DiskTensors
from loongsage.inference.weight_wire.layout import NamedTensors
from loongsage.transfer.rounds import execute_plan
from loongsage.transfer.routes import Plan

log = logging.getLogger(__name__)

STORE = "teacher-store"  # the store as a source of the route plan
PLAN_FILE = "teacher_transfer_plan.json"


class TeacherStore:
    """`teachers`: name -> HF directory; `gpu`: the device (physical index, the actor sees them
    all) the store stages pinned buckets through; None, or a machine where CUDA sees no device
    (Slurm's fake GPUs in the CI's test cluster): the store runs on the CPU."""

    def __init__(self, teachers: dict[str, str], gpu: int | None):
        pinned = gpu is not None and torch.cuda.is_available()
        if pinned:
            torch.cuda.set_device(gpu)
        self.weights: dict[str, NamedTensors] = {name: _held(path, pinned) for name, path in teachers.items()}
        self.host = ray.util.get_node_ip_address()
        self.plan: Plan | None = None
        log.info(
            "teacher store: %d teachers, %.2f GB in %s host memory",
            len(self.weights),
            sum(t.numel() * t.element_size() for w in self.weights.values() for _, t in w) / 1e9,
            "pinned" if pinned else "pageable",
        )

    def address(self) -> str:
        """This node's address, where the plan places the store."""
        return self.host

    def set_plan(self, plan: dict) -> None:
        self.plan = Plan.from_dict(plan)

    def push(self, name: str, slot_url: str) -> dict[str, float]:
        """Teacher `name` into the slot at `slot_url`, committed as weight version `name`."""
        if self.plan is None:
            raise RuntimeError("the teacher store has no route plan yet (set_plan)")
        if name not in self.weights:
            raise ValueError(f"the teacher store holds no teacher {name!r}; it holds {', '.join(sorted(self.weights))}")
        report = execute_plan(self.plan, STORE, self.weights[name], [slot_url], name, self.host)
        if report.failed:
            raise RuntimeError(f"teacher {name} could not be pushed into {slot_url}: {report.failed[slot_url]}")
        return report.metrics


def _held(model_dir: str, pinned: bool) -> NamedTensors:
    """The teacher's tensors copied into this process's memory (pinned for DMA where asked), one
    at a time from its files, so loading never holds a second copy."""
    return [(name, torch.empty_like(tensor, pin_memory=pinned).copy_(tensor)) for name, tensor in DiskTensors(model_dir)]
