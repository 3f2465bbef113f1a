"""The controller's loop: prompts -> rollout -> reward -> teacher scores (if any) -> advantages
-> train -> weight sync.

Who owns which threads (each stops in `Controller.shutdown`, in the order written there):
the rollout pipeline (a producer thread and a pool running prompt groups), the rollout
source (agent episodes: an episode pool and the router's HTTP server; single completions:
the CompletionSampler's event loop thread carrying every engine request, and reward-worker
actors), the rollout engines' EngineFleet (the engine actors), the TeacherGroup (teacher
engine actors, a fleet of their own, and the manager's loader thread), the TrainGroup (the
trainer actors), and the controller itself (one thread at a time for a long call it may give
up on: InterruptibleCalls).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from loongsage.algorithms.advantages import get_advantage
from loongsage.algorithms.critic import CRITIC_ESTIMATORS, reads_critic
from loongsage.cluster.actor_placement import place_actors
from loongsage.config import Config
from loongsage.config.teacher_rules import teacher_routes
from loongsage.controller.checkpoint import (
    clear_unfinished_saves,
    latest_checkpoint,
    load_controller_state,
    save_checkpoint,
)
from loongsage.controller.completion_rollout import CompletionRolloutSource
from loongsage.controller.completion_sampler import CompletionSampler
from loongsage.controller.data_stream import DataStream, Item, from_legacy_state
from loongsage.controller.episodes import assign_critic_advantages, assign_episodes
from loongsage.controller.interruptible import InterruptibleCalls, StepInterrupted, thread_stacks
from loongsage.controller.metrics import rollout_metrics
from loongsage.controller.monitor import Monitor
from loongsage.controller.rewards import RewardPool
from loongsage.controller.rollout_pipeline import PROMPT_GROUP_THREAD, RolloutPipeline, RolloutSource
from loongsage.controller.run_failures import EngineDied, TrainerGaveUp
from loongsage.controller.warm_start import warm_start
from loongsage.inference.activity import IdleClock
from loongsage.inference.engine_launch import EngineSeats
from loongsage.inference.fleet import EngineFleet
from loongsage.models import is_mixture_of_experts, resolve_model_path
from loongsage.sample import Sample
from loongsage.tasks.registry import get_data_source
from loongsage.teachers.group import TeacherGroup
from loongsage.training.errors import TrainerError
from loongsage.training.group import TrainGroup
from loongsage.transfer.weight_routes import SourceSeat, plan_weight_routes, stop_relays

log = logging.getLogger(__name__)

SHUTDOWN_WAIT_S = 30.0  # for rollout threads to end once the engines are stopped
ENGINE_CHECK_EVERY_S = 2.0  # while waiting for a batch: restarted engines to resync, dead ones to report
TRAINER_CHECK_EVERY_S = 0.5  # while waiting for a batch: a dead rank seen sooner restarts sooner (one Ray call per rank)


class Controller:
    def __init__(self, cfg: Config, run_dir: Path):
        self.cfg = cfg
        self.run_dir = run_dir
        self.relays: list = []  # TransferMesh's node relays, started with the route plan
        model_path = str(resolve_model_path(cfg.model.name))
        self.data = DataStream(cfg.data, cfg.rollout.prompts_per_step, cfg.run.seed)
        self.placement = place_actors(cfg)
        log.info("placement:\n%s", self.placement.describe())
        try:
            self.engines = EngineFleet(
                cfg.rollout,
                [model_path] * cfg.rollout.num_engines,
                self.placement.engine_cpus,
                self.placement.engine_options,
                EngineSeats(
                    gpus=self.placement.engine_gpus,
                    followers=self.placement.engine_followers,
                    tp=cfg.roles.rollout.tp,
                    ep=cfg.roles.rollout.ep,
                    routed_experts=is_mixture_of_experts(model_path),
                    colocated=self.placement.placement == "colocate",
                    log_dir=str(run_dir / "engines"),
                ),
            )
            self.teachers = self._teacher_group(model_path)
            self.trainer = self._train_group(model_path)
            self._plan_weight_routes()
        except BaseException:
            self.placement.remove()
            raise
        self.source = self._rollout_source(model_path)
        self.model_path = model_path
        self.trainer_restarts = 0
        self.step = 0
        self.weight_version = 0
        self.pipeline: RolloutPipeline | None = None  # started by run(), after any warm start
        self.calls = InterruptibleCalls("controller")
        # (step, weight version) of what the last checkpoint holds, the version being the one the
        # engines hold it under; None: nothing saved yet (a restart builds the base model again).
        self._checkpointed: tuple[int, int] | None = None
        # The step in progress's batch, kept until the step is done: a trainer restart that lost
        # nothing but the trainer's memory trains it again instead of rolling it out again.
        self._batch: tuple[list[Sample], dict[str, float]] | None = None
        self._warm_started = False
        self._next_engine_check = 0.0
        self._next_trainer_check = 0.0
        self._transfer_metrics: dict[str, float] = {}  # the last weight push's
        self._resume_if_possible()

    def run(self, stop: Callable[[], bool] = lambda: False, abandon: Callable[[], bool] = lambda: False) -> bool:
        """Train until run.steps (True), or until a stop is asked for (False; see stopping.py).
        `stop()` (Slurm's warning, SIGTERM): a step still waiting for its rollout is given up, a
        step training finishes, and the last finished step is saved. `abandon()` (Ctrl-C): the
        warm start or a step training is given up too, and then nothing more is saved.
        EngineDied when an inference engine's process is gone."""
        monitor = Monitor(self.cfg.logging, self.run_dir, self.cfg.run.steps, self.step)
        try:
            if stop():
                raise StepInterrupted("asked to stop before the first step")
            if self.cfg.warm_start.source and not self._warm_started:
                self._warm_start(monitor, stop, abandon)
                self._warm_started = True
                # Step 0, the warm-started weights: neither a resume nor a trainer restart redoes it.
                self._save()
                monitor.start_clock()
            self._start_pipeline()
            while self.step < self.cfg.run.steps:
                if stop():
                    raise StepInterrupted("asked to stop between steps")
                try:
                    samples, metrics = self._one_step(stop, abandon)
                    self.step += 1
                    monitor.log(self.step, metrics, samples)
                    if self.step % self.cfg.run.save_every == 0 or self.step == self.cfg.run.steps:
                        self._save()
                    if self.step < self.cfg.run.steps:  # run.spare_trainer; off the start's and a restart's path
                        self.trainer.start_spares()
                except TrainerError as error:
                    monitor.close()
                    self._restart_trainer(error)
                    monitor = Monitor(self.cfg.logging, self.run_dir, self.cfg.run.steps, self.step)
            return True
        except StepInterrupted as interrupted:
            self._stop_here(interrupted)
            return False
        except EngineDied:
            raise
        except Exception as error:
            self._stop_if_engines_died(error)
            raise
        finally:
            monitor.close()

    def shutdown(self) -> None:
        """Everything the run started, stopped in this order (the one place it is written):
        1. the pipeline admits no more prompt groups, and its producer thread ends;
        2. the engines stop, so every request in flight ends: the pipeline's group threads, the
           agent episodes and the request loop's coroutines return instead of waiting forever;
           then the teachers' engines (a scoring call given up on ends with them);
        3. the rollout source: the sandboxes of episodes in flight (destroyed, so a black-box
           program retrying the dead endpoint ends now), the episode pool and router server; or
           the completion sampler's request loop (a thread still waiting on it gets
           RequestLoopClosed) and the reward workers;
        4. the trainer's actors, so a training call given up on returns, then the weight relays
           (nothing pushes through them any more);
        5. the threads given up on (a controller call, the pipeline's groups) are waited for,
           bounded: Ray ends the whole process if one of its threads calls it after
           ray.shutdown(), which run.py does next;
        6. the placement group, releasing the actors' seats."""
        if self.pipeline is not None:
            self.pipeline.close()
        self.engines.stop()
        if self.teachers is not None:
            self.teachers.shutdown()
        self.source.close()
        self.trainer.shutdown()
        stop_relays(self.relays)
        stuck = [thread for thread in [self.calls.close(SHUTDOWN_WAIT_S)] if thread is not None]
        if self.pipeline is not None and self.pipeline.wait_for_groups(SHUTDOWN_WAIT_S):
            stuck += [t for t in threading.enumerate() if t.name.startswith(PROMPT_GROUP_THREAD)]
        if stuck:
            log.warning("still running at shutdown: %s\n%s", ", ".join(t.name for t in stuck), thread_stacks(stuck))
        self.placement.remove()

    def _start_pipeline(self) -> None:
        first_group = self.step * self.cfg.rollout.prompts_per_step  # seeds and names go on across a resume
        self.pipeline = RolloutPipeline(self.cfg, self.data, self.source, self.engines, first_group)
        self._idle_clock = IdleClock(self.engines.activity)

    def _restart_trainer(self, error: TrainerError) -> None:
        """A rank died: a new trainer group on the same seats, with the last checkpoint loaded
        (weights, optimizer). When that checkpoint is the last finished step and the engines hold
        its weights (the death came before the next push), the trainer's memory is all that was
        lost: rollout goes on meanwhile and the step in progress trains again on its batch.
        Otherwise the steps after the checkpoint are trained again: the data position with its
        unsettled items comes from the checkpoint too, the engines get its weights under a new
        version, and a new pipeline starts from there.
        TrainerGaveUp when the error is not a death or the restarts are spent."""
        budget = self.cfg.run.max_restarts
        checkpoint = latest_checkpoint(self.run_dir)
        if not error.died or self.trainer_restarts >= budget:
            raise TrainerGaveUp(error, self.trainer_restarts, budget, checkpoint) from error
        self.trainer_restarts += 1
        started = time.perf_counter()
        where = f"{checkpoint}" if checkpoint else "the base model (no checkpoint yet)"
        log.warning(
            "%s; restart %d of run.max_restarts=%d: a new trainer group from %s", error, self.trainer_restarts, budget, where
        )
        # No checkpoint: the base model, which the engines hold under version 0 until a push.
        lost_only_the_trainer = (self._checkpointed or (0, 0)) == (self.step, self.weight_version)
        if not lost_only_the_trainer:
            self.pipeline.close()  # its groups in flight end into a buffer nobody reads
            self.pipeline = None
            self._batch = None
            self.data = DataStream(self.cfg.data, self.cfg.rollout.prompts_per_step, self.cfg.run.seed)
            self.step = 0
            if checkpoint is not None:
                self._restore_controller_state(load_controller_state(checkpoint))
        spares = self.trainer.take_spares()
        self.trainer = self._train_group(self.model_path, spares)
        self.trainer.set_weight_plan(self.weight_plan)
        built = time.perf_counter()
        if checkpoint is not None:
            self.trainer.load_checkpoint(str(checkpoint / "trainer"))
        loaded = time.perf_counter()
        if lost_only_the_trainer:
            went_on = "the step's batch kept" if self._batch else "rollout went on meanwhile"
        else:
            with self.engines.weight_update(interrupt=True):  # what the old pipeline still generates stops
                self._sync_weights()
            self._checkpointed = (self.step, self.weight_version) if checkpoint is not None else None
            self._start_pipeline()
            went_on = f"weight push {time.perf_counter() - loaded:.1f} s"
        log.info(
            "trainer restarted at step %d in %.1f s (new group %.1f s%s, checkpoint load %.1f s, %s)",
            self.step,
            time.perf_counter() - started,
            built - started,
            " in its spare processes" if spares else "",
            loaded - built,
            went_on,
        )

    def _teacher_group(self, model_path: str) -> TeacherGroup | None:
        """The teachers' engines on their seats (roles.teacher), when some data source has one."""
        if not teacher_routes(self.cfg):
            return None
        seats = self.placement.seats("teacher")
        return TeacherGroup(
            self.cfg,
            model_path,
            self.run_dir,
            ray_options=[seat.actor_options() for seat in seats] or None,
            gpus=[list(seat.gpus) for seat in seats] or None,
        )

    def _train_group(self, model_path: str, spares: list | None = None) -> TrainGroup:
        """`spares`: the processes of the group it replaces kept for it (run.spare_trainer)."""
        cfg = self.cfg
        group = TrainGroup(
            model_path,
            cfg.trainer,
            cfg.algorithm,
            cfg.run.seed,
            ray_options=self.placement.trainer_options,
            cpus=self.placement.trainer_cpus,
            spares=cfg.run.spare_trainer,
            adopt=spares or None,
        )
        log.info("trainer ranks' processes: %s", ", ".join(f"rank {rank} pid {pid}" for rank, pid in enumerate(group.pids)))
        return group

    def _rollout_source(self, model_path: str) -> RolloutSource:
        """Agent episodes through the router when an agent is configured, else one completion per sample."""
        if self.cfg.agent.name:
            # Imported here: the router it runs (FastAPI) is for runs with an agent only.
            from loongsage.controller.agent_rollout import AgentRolloutSource

            return AgentRolloutSource(self.cfg, self.engines, model_path)
        rewards = RewardPool(self.cfg.data.reward, self.cfg.data.num_reward_workers, self.cfg.data.reward_timeout_s)
        sampler = CompletionSampler(self.cfg.rollout, self.engines, model_path)
        return CompletionRolloutSource(sampler, rewards, self.cfg.run.seed)

    def _warm_start(self, monitor: Monitor, stop: Callable[[], bool], abandon: Callable[[], bool]) -> None:
        ws = self.cfg.warm_start
        # The run's system prompt, so the demonstrations look exactly as the run's episodes will.
        items = [
            Item("warm_start", index, data, self.cfg.data.system_prompt)
            for index, data in enumerate(get_data_source(ws.source)(**ws.options))
        ]
        samples = self.calls.call(lambda: self.source.demonstrations(items), stop, "recording the demonstrations")
        log.info("warm start: %d demonstrations from %s", len(samples), ws.source)

        def log_update(update: int, metrics: dict[str, float]) -> None:
            monitor.scalars(update, {"warm_start/nll": metrics["train/loss"], "warm_start/grad_norm": metrics["train/grad_norm"]})

        self.calls.call(
            lambda: warm_start(samples, ws, self.trainer.supervised_step, self.cfg.run.seed, log_update),
            abandon,
            "the warm start",
            trainer_busy=True,
        )
        self.calls.call(self._sync_weights, abandon, "the weight sync after the warm start", trainer_busy=True)

    def _assign_advantages(self, samples: list[Sample], stop: Callable[[], bool], step: int) -> dict[str, float]:
        """Each sample's advantages from its episode's reward: by the outcome estimator
        algorithm.advantage names, or by the critic's values of its tokens (gae)."""
        algo = self.cfg.algorithm
        if not reads_critic(algo.advantage):
            assign_episodes(samples, get_advantage(algo.advantage), algo.normalize_std)
            return {}
        values = self.calls.call(lambda: self.trainer.compute_values(samples), stop, f"the critic's values of step {step}")
        return assign_critic_advantages(samples, values, CRITIC_ESTIMATORS.get(algo.advantage), algo)

    def _one_step(self, stop: Callable[[], bool], abandon: Callable[[], bool]) -> tuple[list[Sample], dict[str, float]]:
        """Step `self.step + 1`; StepInterrupted (nothing trained) when `stop()` turns true while
        its batch is still being rolled out, or `abandon()` while it trains or syncs weights."""
        step = self.step + 1
        started = time.perf_counter()
        if self._batch is None:
            self._batch = self.pipeline.take(self.weight_version, self._tending_engines(stop))
        samples, pipeline_metrics = self._batch
        if step == self.cfg.run.steps:  # nothing more will be trained: start no more groups
            self.pipeline.close()
        rolled_out = time.perf_counter()
        # Episodes that failed because their engine died would train as zero-reward noise.
        self._stop_if_engines_died()
        teacher_metrics = {}
        if self.teachers is not None:
            teacher_metrics = self.calls.call(lambda: self.teachers.score(samples), stop, f"the teachers' scoring of step {step}")
        scored = time.perf_counter()
        critic_metrics = self._assign_advantages(samples, stop, step)
        self.engines.release_memory()
        metrics = self.calls.call(
            lambda: self.trainer.train_step(samples, policy_version=self.weight_version),
            abandon,
            f"training step {step}",
            trainer_busy=True,
        )
        trained = time.perf_counter()
        self.calls.call(self._sync_weights, abandon, f"the weight sync of step {step}", trainer_busy=True)
        synced = time.perf_counter()
        self._batch = None
        metrics.update(rollout_metrics(samples))
        metrics.update(pipeline_metrics)
        metrics.update(self._transfer_metrics)
        metrics.update(teacher_metrics)
        metrics.update(critic_metrics)
        metrics.update(
            {
                # Waiting for the batch: only what rollout did not hide (all of it in run.mode=sync).
                "timing/rollout_s": rolled_out - started,
                "timing/teacher_s": scored - rolled_out,
                "timing/train_s": trained - scored,
                "timing/weight_sync_s": synced - trained,
                "timing/step_s": synced - started,
                "rollout/weight_version": float(self.weight_version),
                "async/trainer_idle_ratio": 1.0 - (trained - scored) / max(synced - started, 1e-9),
                "async/rollout_idle_ratio": self._idle_clock.lap(),
                "faults/engine_restarts": float(self.engines.restarts()),
                "faults/engine_failovers": float(self.engines.roster.failures),
                "faults/trainer_restarts": float(self.trainer_restarts),
            }
        )
        return samples, metrics

    def _tending_engines(self, stop: Callable[[], bool]) -> Callable[[], bool]:
        """`stop`, polled while the batch rolls out, also tending the engines every few seconds:
        one that died for good stops the run; one that came back after a restart gets the
        published weights (the trainer holds exactly those while it waits for a batch). The
        trainer, idle meanwhile, is asked whether its ranks live: a dead one restarts it now."""

        def poll() -> bool:
            if time.monotonic() >= self._next_trainer_check:
                self._next_trainer_check = time.monotonic() + TRAINER_CHECK_EVERY_S
                self.trainer.check_alive()
            if time.monotonic() >= self._next_engine_check:
                self._next_engine_check = time.monotonic() + ENGINE_CHECK_EVERY_S
                self._stop_if_engines_died()
                self.engines.resync(lambda urls: self.trainer.push_weights(urls, self.weight_version))
            return stop()

        return poll

    def _stop_if_engines_died(self, cause: Exception | None = None) -> None:
        dead = self.engines.dead_engines()
        if dead:
            raise EngineDied(dead, self.step + 1, latest_checkpoint(self.run_dir), cause) from None

    def _sync_weights(self) -> None:
        self.weight_version += 1
        version = self.weight_version

        def push() -> None:
            with self.engines.memory_resumed_for_push():
                self._transfer_metrics = self.engines.push_weights(lambda urls: self.trainer.push_weights(urls, version), version)

        if self.pipeline is not None:
            self.pipeline.update_weights(push)
        else:  # the warm start's, before rollout starts
            push()

    def _plan_weight_routes(self) -> None:
        """TransferMesh: the route of every engine's weights, planned once from the probed topology."""
        trainer_seats = self.placement.seats("trainer")
        sources = {
            rank: SourceSeat(host, list(trainer_seats[rank].gpus) if trainer_seats else [])
            for rank, host in self.trainer.weight_sources.items()
        }
        self.weight_plan, self.relays = plan_weight_routes(
            self.cfg.trainer.weight_sync, sources, self.engines.urls, self.placement.engine_gpus, self.run_dir
        )
        self.trainer.set_weight_plan(self.weight_plan)

    def _save(self) -> None:
        state = {
            "step": self.step,
            "weight_version": self.weight_version,
            "warm_started": self._warm_started,
            "data": self.data.state_dict(),
        }
        run = self.cfg.run
        save_checkpoint(self.run_dir, self.step, state, self.trainer.save_checkpoint, run.keep_checkpoints, run.keep_every)
        self._checkpointed = (self.step, self.weight_version)

    def _stop_here(self, interrupted: StepInterrupted) -> None:
        """The checkpoint a stopping run resumes from, unless its last step was just saved, it has
        not trained at all (a finished warm start counts: step 0 with the warm-started weights), or
        the trainer was stopped in the middle of an update (then the last checkpoint stands)."""
        started = time.perf_counter()
        trained = self.step > 0 or self._warm_started
        if interrupted.trainer_busy:
            checkpoint = latest_checkpoint(self.run_dir)
            kept = f"the last checkpoint is {checkpoint}" if checkpoint else "no checkpoint yet: the run starts over"
            log.info(
                "stopping at step %d: %s, nothing saved (%s; SIGTERM instead of Ctrl-C finishes the step in "
                "progress and saves it)",
                self.step,
                interrupted,
                kept,
            )
            return
        if not trained:
            log.info("stopping before training: nothing to save")
            return
        if self._checkpointed is None or self._checkpointed[0] != self.step:
            self._save()
        log.info("stopping at step %d: checkpoint written in %.1f s", self.step, time.perf_counter() - started)

    def _restore_controller_state(self, state: dict) -> None:
        """The step and the data position of a checkpoint's controller state (not the weight
        version: a restart goes on from the published one)."""
        self.step = state["step"]
        # Checkpoints from before the field existed are all of trained steps, after any warm start.
        self._warm_started = state.get("warm_started", True)
        self.data.load_state_dict(state["data"] if "data" in state else from_legacy_state(state, self.data))

    def _resume_if_possible(self) -> None:
        unfinished = clear_unfinished_saves(self.run_dir)
        if unfinished:
            log.info("removed %d unfinished checkpoint save(s) of an earlier run: %s", len(unfinished), ", ".join(unfinished))
        checkpoint = latest_checkpoint(self.run_dir)
        if checkpoint is None:
            if self.cfg.run.resume:
                raise FileNotFoundError(f"run.resume=true but {self.run_dir} holds no checkpoint to resume from")
            return
        state = load_controller_state(checkpoint)
        self.trainer.load_checkpoint(str(checkpoint / "trainer"))
        self._restore_controller_state(state)
        self.weight_version = state["weight_version"]
        # The engines start from the base model; give them the checkpoint's weights.
        version = self.weight_version
        self.engines.push_weights(lambda urls: self.trainer.push_weights(urls, version), version)
        self._checkpointed = (self.step, version)
        log.info("resumed from %s at step %d", checkpoint, self.step)
