"""TeacherGroup: the run's teachers as an EngineFleet of their own (rollout.engine's kind, so
embedded engines here and SGLang servers on a cluster's `roles.teacher.gpus`), scored through a
TeacherManager, and the routing of each sample to its data source's teacher.

The slots start on the first teachers of teachers.pool (their engines load those weights,
labelled with the teachers' names); the others are swapped in when their samples come, from
their files or, with teachers.offload=host, from a TeacherStore actor on the first slot's node.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from pathlib import Path

import ray

from loongsage.config import Config
from loongsage.config.data_mix import SINGLE_SOURCE
from loongsage.config.teacher_rules import resident_slots, teacher_routes
from loongsage.inference.client import EngineClient
from loongsage.inference.engine_launch import EngineSeats
from loongsage.inference.fleet import EngineFleet
from loongsage.models import load_tokenizer, resolve_model_path
from loongsage.sample import Sample
from loongsage.teachers.loaders import DiskLoader, HostLoader, TeacherLoader
from loongsage.teachers.manager import TeacherManager
from loongsage.teachers.scoring import ScoreRequest
from loongsage.teachers.signal import apply_scores
from loongsage.teachers.teacher import Teacher


class TeacherGroup:
    """`ray_options`: each slot's Ray actor options (its `roles.teacher` seat), None: Ray's
    defaults on this machine; `gpus`: each slot's devices (SGLang's CUDA_VISIBLE_DEVICES);
    `run_dir`: where the engines' logs (engines/) and a teacher store's route plan go."""

    def __init__(
        self,
        cfg: Config,
        student_path: str,
        run_dir: Path,
        ray_options: Sequence[dict] | None = None,
        gpus: list[list[int]] | None = None,
    ):
        self.opd = cfg.algorithm.opd
        self.routes = teacher_routes(cfg)
        self.teachers = [Teacher(t.name, str(resolve_model_path(t.model))) for t in cfg.teachers.pool]
        _check_vocabularies(student_path, self.teachers)
        slots = resident_slots(cfg)
        starting = self.teachers[:slots]
        self.gpus = gpus
        self.run_dir = run_dir
        self.engines = EngineFleet(
            cfg.rollout,
            [teacher.model_path for teacher in starting],
            ray_options=ray_options[:slots] if ray_options else None,
            # SGLang slots take the indices after the rollout engines': their own ports and log files.
            seats=EngineSeats(
                gpus=gpus[:slots] if gpus else None, log_dir=str(run_dir / "engines"), first_index=cfg.rollout.num_engines
            ),
            weight_versions=[teacher.name for teacher in starting],
            count_key="teachers.max_resident",
            # A restarted actor would serve the teacher it was created with, not the one swapped in since.
            actor_restarts=False,
        )
        waiting = slots < len(self.teachers)  # some teacher is swapped in when its samples come
        self.store = _start_store(self.teachers, ray_options, gpus) if waiting and cfg.teachers.offload == "host" else None
        self._relays: list = []

    @cached_property
    def manager(self) -> TeacherManager:
        clients = self.engines.clients
        top_k = self.opd.top_k if self.opd.style == "gkd" else 0
        resident = [teacher.name for teacher in self.teachers[: len(clients)]]
        return TeacherManager(self.teachers, clients, top_k=top_k, resident=resident, loader=self._loader(clients))

    def _loader(self, slots: list[EngineClient]) -> TeacherLoader:
        """The disk loader, or the store's once its routes to the slots are planned."""
        if self.store is None:
            return DiskLoader()
        from loongsage.teachers.store import PLAN_FILE, STORE
        from loongsage.transfer.routes import Endpoint
        from loongsage.transfer.weight_routes import plan_pushes, probed_gpus, probed_topology

        topology = probed_topology()
        host = ray.get(self.store.address.remote())
        store_gpus = probed_gpus(topology, host, self.gpus[0][:1] if self.gpus else [])
        sender = Endpoint(STORE, "source", topology.host(host), store_gpus)
        urls = [slot.base_url for slot in slots]
        plan, self._relays = plan_pushes(
            topology, [sender], urls, self.gpus, None, self.run_dir / PLAN_FILE, "teachers.offload=host"
        )
        ray.get(self.store.set_plan.remote(plan.to_dict()))
        return HostLoader(self.store)

    def score(self, samples: Sequence[Sample]) -> dict[str, float]:
        """Every sample whose data source has a teacher gets that teacher's signal (see signal.py);
        the others keep their reward only. Returns the teacher metrics of this batch."""
        routed = [(s, self.routes.get(s.metadata.get("source", SINGLE_SOURCE))) for s in samples]
        taught = [s for s, teacher in routed if teacher]
        requests = [ScoreRequest(teacher, s.prompt_ids, s.response_ids) for s, teacher in routed if teacher]
        stats = self.manager.stats
        before = (stats.swaps, stats.swap_s, stats.score_s)
        metrics = apply_scores(taught, self.manager.score(requests), self.opd) if requests else {}
        metrics.update(
            {
                # Scoring alone; timing/teacher_s is the whole step part, swaps included.
                "teacher/score_s": stats.score_s - before[2],
                "teacher/swaps": float(stats.swaps - before[0]),
                "teacher/swap_s": stats.swap_s - before[1],
                "teacher/resident": float(len(self.manager.resident())),
                "teacher/samples": float(len(taught)),
            }
        )
        return metrics

    def shutdown(self) -> None:
        if "manager" in self.__dict__:
            self.manager.close()
        self.engines.stop()
        if self.store is not None:
            from loongsage.transfer.weight_routes import stop_relays

            stop_relays(self._relays)
            ray.kill(self.store)


def _start_store(teachers: Sequence[Teacher], ray_options: Sequence[dict] | None, gpus: list[list[int]] | None):
    """The TeacherStore actor, on the first slot's node (its seat's placement group, asking for no
    share of it) where slots are placed; it stages pinned buckets through that slot's GPU, which
    it sees by physical index, as a relay does."""
    from loongsage.teachers.store import TeacherStore

    options: dict = {"num_cpus": 0}
    if ray_options:
        options.update(
            scheduling_strategy=ray_options[0]["scheduling_strategy"],
            num_gpus=0,
            runtime_env={"env_vars": {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1"}},
        )
    gpu = gpus[0][0] if gpus else None
    return ray.remote(TeacherStore).options(**options).remote({t.name: t.model_path for t in teachers}, gpu)


def _check_vocabularies(student_path: str, teachers: Sequence[Teacher]) -> None:
    """A teacher scores the student's token ids: it must read them as the same tokens."""
    student = load_tokenizer(student_path).get_vocab()
    for teacher in teachers:
        if load_tokenizer(teacher.model_path).get_vocab() != student:
            raise ValueError(
                f"teacher {teacher.name!r} ({teacher.model_path}) has another tokenizer than the student ({student_path}); "
                f"a teacher scores the student's token ids, so it must share the student's vocabulary"
            )
