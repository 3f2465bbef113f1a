"""EngineFleet: inference engines as Ray actors serving SGLang's HTTP protocol (`rollout.engine`'s
kind), one per model path, from launch to stop: which of them answer and hold the published
weights (their EngineRoster), pushing weights to them and to the ones that come back after a
restart, pausing them around a push, releasing a colocated engine's memory while the trainer
steps, and which of them died for good. The rollout's engines are one fleet, the teachers'
another."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from functools import cached_property
from typing import Protocol

import ray

from loongsage.cluster.actor_placement import check_one_per_actor
from loongsage.config import RolloutConfig
from loongsage.inference.activity import ActivityMeter
from loongsage.inference.client import EngineClient, EngineError
from loongsage.inference.engine_launch import EngineSeats, engine_cfg
from loongsage.inference.engine_roster import EngineRoster
from loongsage.inference.engine_status import dead_engines, engine_restarts
from loongsage.inference.engines import engine_actor, is_restarted, restart_options

log = logging.getLogger(__name__)

ENGINE_STOP_TIMEOUT_S = 10.0
MEMORY_TAGS = ("weights", "kv_cache")  # what a colocated engine frees while the trainer steps
BASE_WEIGHT_VERSION = "0"  # a rollout engine's starting weights: older than any the trainer publishes


class PushReport(Protocol):
    """What a weight push reports (transfer's RoundReport; inference sits below transfer)."""

    metrics: dict[str, float]
    updated: list[str]  # the engines that hold the pushed version
    failed: dict[str, str]  # engine URL -> why it does not


class EngineFleet:
    def __init__(
        self,
        cfg: RolloutConfig,
        model_paths: Sequence[str],
        cpus: list[list[int]] | None = None,
        ray_options: Sequence[dict] | None = None,
        seats: EngineSeats | None = None,
        weight_versions: Sequence[str] | None = None,
        count_key: str = "rollout.num_engines",
        actor_restarts: bool = True,
    ):
        """One engine per entry of `model_paths`, its starting weights labelled with the entry of
        `weight_versions` (default: BASE_WEIGHT_VERSION). `cpus`: the cores of each engine
        (disaggregated placement on this machine); None: all cores. `ray_options`: each engine's
        Ray actor options (its placement-group seat); None: Ray's defaults. `seats`: None, on this
        machine's devices as Ray hands them out. `count_key`: the setting that gives the number of
        engines, for messages. `actor_restarts`: an engine living in its actor is restarted by Ray
        (rollout.max_engine_restarts), which serves its starting weights until the next push."""
        seats = seats or EngineSeats()
        count = len(model_paths)
        check_one_per_actor(cpus, count, "EngineFleet cpus", count_key)
        check_one_per_actor(ray_options, count, "EngineFleet ray_options", count_key)
        check_one_per_actor(seats.gpus, count, "EngineFleet seats.gpus", count_key)
        if any(seats.followers or []) and cfg.engine != "sglang":
            raise ValueError(
                f"roles.rollout.tp={seats.tp} spans nodes, which only rollout.engine=sglang runs (one server per node); "
                f"rollout.engine={cfg.engine!r} runs on one node: lower roles.rollout.tp to a node's GPUs"
            )

        self.cfg = cfg
        self.colocated = seats.colocated
        self.weights_released = False  # between release_memory and the next push's resume
        engine = engine_actor(cfg.engine)
        restarts = restart_options(cfg.engine, cfg.max_engine_restarts) if actor_restarts else {}
        if actor_restarts and cfg.max_engine_restarts > 0 and not is_restarted(cfg.engine):
            log.warning(
                "rollout.engine=%s is not restarted (rollout.max_engine_restarts=%d applies to embedded and sglang "
                "only): an engine of it that dies stops the run",
                cfg.engine,
                cfg.max_engine_restarts,
            )
        versions = weight_versions or [BASE_WEIGHT_VERSION] * count
        self.actors = [
            engine.options(**restarts, **(ray_options[i] if ray_options else {})).remote(
                model_path, engine_cfg(cfg, i, cpus[i] if cpus else None, seats, versions[i]), cpus[i] if cpus else None
            )
            for i, model_path in enumerate(model_paths)
        ]
        # Engines load their weights while the caller goes on (e.g. to start the trainer).
        self._started = [actor.start.remote() for actor in self.actors]
        self.activity = ActivityMeter()

    @cached_property
    def urls(self) -> list[str]:
        return ray.get(self._started)

    @cached_property
    def roster(self) -> EngineRoster:
        """Shared with the router and the rollout's requests: which engines answer and hold the
        published weights."""
        return EngineRoster(self.urls)

    @cached_property
    def clients(self) -> list[EngineClient]:
        return [EngineClient(url, timeout=self.cfg.request_timeout_s) for url in self.urls]

    @contextmanager
    def weight_update(self, interrupt: bool):
        """Around pushing new weights while generation may be in flight: engines pause, and with
        `interrupt` what is in flight is aborted (pause mode "abort": its partial output returns
        to the caller, who continues it after the update); the engines continue once the block is
        done. Without `interrupt` the pause holds requests in place, so the caller must have
        nothing in flight, or responses would mix versions (and SGLang refuses to flush its cache).
        An engine that does not answer is skipped: it is down, and gets the weights once back."""
        mode = "abort" if interrupt else "in_place"
        with self.activity.paused():
            self._each_answering(lambda client: client.pause_generation(mode=mode))
            try:
                yield
            finally:
                self._each_answering(lambda client: client.continue_generation())

    def push_weights(self, push: Callable[[list[str]], PushReport], version: int) -> dict[str, float]:
        """`push(urls)` loads the trainer's weights, `version`, into the engines that answer and
        reports which hold it (`TrainGroup.push_weights`); the ones that do not (restarting, or
        failed twice) are out of rotation and pushed to by `resync` once they answer. One more
        push when an engine dies during this one: the others must not keep the old weights.
        Returns the transfer metrics."""
        urls = self.roster.answering()
        try:
            report = push(urls)
        except Exception:
            self._mark_unreachable(urls)
            still = self.roster.answering()
            if still == urls:
                raise
            log.warning("an engine died during the weight push of version %d; pushing again to %s", version, still)
            report = push(still)
        self._publish(version, report)
        return report.metrics

    def resync(self, push: Callable[[list[str]], PushReport]) -> list[str]:
        """Give engines that came back without the published weights (a restarted process serves
        the base model) those weights; the trainer must hold exactly the published version.
        Returns the engines pushed to."""
        urls = self.roster.needing_weights()
        if urls:
            log.info("pushing weights of version %d to restarted engine(s) %s", self.roster.published(), ", ".join(urls))
            self._publish(self.roster.published(), push(urls))
        return urls

    def release_memory(self) -> None:
        """Colocated engines free their weights and KV cache while the trainer steps on the same
        devices (nothing may be in flight); `memory_resumed_for_push` brings it back. Disaggregated
        engines keep theirs. Released already (the step trained again after a trainer restart):
        nothing to do."""
        if self.colocated and not self.weights_released:
            self._each_answering(lambda client: client.release_memory_occupation(list(MEMORY_TAGS)))
            self.weights_released = True

    @contextmanager
    def memory_resumed_for_push(self):
        """Around a weight push: the weights' memory is back before the push writes into it, the KV
        cache only after it, so the trainer's memory and the engines' caches are not needed at once.
        (Resuming what was not released does nothing.)"""
        if self.colocated:
            self._each_answering(lambda client: client.resume_memory_occupation(["weights"]))
            self.weights_released = False
        yield
        if self.colocated:
            self._each_answering(lambda client: client.resume_memory_occupation(["kv_cache"]))

    def stop(self) -> None:
        """Stop every engine at once, waiting a bounded time for each, so requests in flight end;
        a request waiting for an engine to come back gets NoEngineAvailable instead."""
        if "roster" in self.__dict__:
            self.roster.close()
        stopping = [actor.stop.remote() for actor in self.actors]
        for actor, stopped in zip(self.actors, stopping):
            try:
                ray.get(stopped, timeout=ENGINE_STOP_TIMEOUT_S)
            except ray.exceptions.RayActorError:
                pass  # already dead: nothing to stop (the run says which engine died)
            except ray.exceptions.GetTimeoutError:
                ray.kill(actor)  # hung (or stopped by a debugger): it must not hold the run's exit

    def dead_engines(self) -> list[str]:
        """The engines that are gone for good (actor dead, or restarts exhausted), named for the
        message that stops the run."""
        return dead_engines(self.actors, self.__dict__.get("urls", []))

    def restarts(self) -> int:
        """Engine process restarts over the run, all engines together."""
        return engine_restarts(self.actors)

    def _publish(self, version: int, report: PushReport) -> None:
        """Only engines that hold `version` serve it; a push that failed on every engine it tried
        stops the run (one to no engine, all being down, waits for them to come back)."""
        for url, why in report.failed.items():
            log.error(
                "engine %s did not get weight version %d (%s): out of rotation until a later push reaches it", url, version, why
            )
        if report.failed and not report.updated:
            raise RuntimeError(f"the weight push of version {version} reached no engine: {report.failed}")
        self.roster.publish(version, report.updated)

    def _each_answering(self, call: Callable[[EngineClient], object]) -> None:
        for client in self.clients:
            if client.base_url in self.roster.answering():
                try:
                    call(client)
                except EngineError as exc:
                    if exc.status is not None:
                        raise
                    self.roster.mark_down(self.clients.index(client), str(exc))

    def _mark_unreachable(self, urls: list[str]) -> None:
        for index, client in enumerate(self.clients):
            if client.base_url in urls and not client.health():
                self.roster.mark_down(index, "no answer to /health after a failed weight push")
