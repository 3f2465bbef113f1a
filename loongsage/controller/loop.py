"""The controller's loop: prompts -> rollout -> reward -> advantages -> train -> weight sync."""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable

import torch

from loongsage.algorithms.advantages import grouped_advantages
from loongsage.cluster.actor_placement import place_actors
from loongsage.config import Config
from loongsage.controller.agent_rollout import AgentRolloutSource
from loongsage.controller.async_rollout import ROLLOUT_GROUP_THREAD, AsyncRollout
from loongsage.controller.interruptible import StepInterrupted, call_interruptibly, thread_stacks
from loongsage.controller.engine_failure import EngineDied
from loongsage.controller.checkpoint import latest_checkpoint, load_controller_state, save_checkpoint
from loongsage.controller.metrics import rollout_metrics
from loongsage.controller.monitor import Monitor
from loongsage.controller.prompts import prompt_stream
from loongsage.controller.rewards import RewardPool
from loongsage.controller.rollout import RolloutGroup
from loongsage.controller.sync_rollout import SyncRolloutSource
from loongsage.controller.warm_start import warm_start
from loongsage.inference.activity import IdleClock
from loongsage.models import load_tokenizer, resolve_model_path
from loongsage.sample import Sample
from loongsage.tasks.registry import get_data_source
from loongsage.training.group import TrainGroup

SHUTDOWN_WAIT_S = 30.0  # for rollout threads to end once the engines are stopped


class Controller:
    def __init__(self, cfg: Config, run_dir: Path):
        self.cfg = cfg
        self.run_dir = run_dir
        model_path = str(resolve_model_path(cfg.model.name))
        self.prompts = prompt_stream(cfg.data, load_tokenizer(model_path), cfg.run.seed)
        self.placement = place_actors(cfg)
        print(f"[loongsage] placement:\n{self.placement.describe()}", flush=True)
        try:
            self.rollout = RolloutGroup(cfg.rollout, model_path, self.placement.engine_cpus, self.placement.engine_options)
            self.trainer = TrainGroup(model_path, cfg.trainer, cfg.algorithm, cfg.run.seed,
                                      ray_options=self.placement.trainer_options, cpus=self.placement.trainer_cpus)
        except BaseException:
            self.placement.remove()
            raise
        self.source = self._rollout_source(model_path)
        self.step = 0
        self.weight_version = 0
        self.async_rollout: AsyncRollout | None = None  # one_step_off / fully_async, started by run()
        self._pending_items: list = []  # taken by an asynchronous run's rollout, not trained when it saved
        self._saved_step = -1
        self._warm_started = False
        self._abandoned: list[threading.Thread] = []  # rollouts given up when the run was stopped
        self._resume_if_possible()

    def run(self, stop: Callable[[], bool] = lambda: False, abandon: Callable[[], bool] = lambda: False) -> bool:
        """Train until run.steps (True), or until a stop is asked for (False; see stopping.py).
        `stop()` (Slurm's warning, SIGTERM): a step still waiting for its rollout is given up, a
        step training finishes, and the last finished step is saved. `abandon()` (Ctrl-C): the
        warm start or a step training is given up too, and then nothing more is saved.
        EngineDied when an inference engine's process is gone."""
        monitor = Monitor(self.cfg.logging, self.run_dir, self.cfg.run.steps, self.step)
        prompts_before = None
        try:
            if stop():
                raise StepInterrupted("asked to stop before the first step")
            if self.cfg.warm_start.source and not self._warm_started:
                self._warm_start(monitor, stop, abandon)
                self._warm_started = True
                monitor.start_clock()
            if self.cfg.run.mode != "sync" or self.cfg.pipeline.filter_zero_variance:
                first_group = self.step * self.cfg.rollout.prompts_per_step
                self.async_rollout = AsyncRollout(self.cfg, self.source, self.rollout, first_group, self._pending_items)
            self._idle_clock = IdleClock(self.rollout.activity)
            while self.step < self.cfg.run.steps:
                # Sync: where the stream stood after the last step. Async: the rollout's own
                # checkpoint_state (read under its lock) says it, so nothing is read here.
                prompts_before = self.prompts.state_dict() if self.async_rollout is None else None
                if stop():
                    raise StepInterrupted("asked to stop between steps")
                samples, metrics = self._one_step(stop, abandon)
                self.step += 1
                monitor.log(self.step, metrics, samples)
                if self.step % self.cfg.run.save_every == 0 or self.step == self.cfg.run.steps:
                    self._save()
            return True
        except StepInterrupted as interrupted:
            if interrupted.abandoned is not None:
                self._abandoned.append(interrupted.abandoned)
            self._stop_here(interrupted, prompts_before)
            return False
        except EngineDied:
            raise
        except Exception as error:
            self._stop_if_engines_died(error)
            raise
        finally:
            monitor.close()

    def shutdown(self) -> None:
        """Generation stops first and then the trainer, so threads given up on (a rollout, a
        training step) end fast and are waited for: Ray ends the whole process if one of its
        threads calls it after ray.shutdown()."""
        if self.async_rollout is not None:
            self.async_rollout.close()
        self.rollout.shutdown()
        self.source.close()
        self.trainer.shutdown()
        still_running = []
        for thread in self._abandoned:
            thread.join(SHUTDOWN_WAIT_S)
            if thread.is_alive():
                still_running.append(thread.name)
        if self.async_rollout is not None and self.async_rollout.wait_for_groups(SHUTDOWN_WAIT_S):
            still_running.append("asynchronous rollout groups")
        if still_running:
            stuck = [t for t in threading.enumerate() if t in self._abandoned or t.name.startswith(ROLLOUT_GROUP_THREAD)]
            print(f"[loongsage] warning: still running at shutdown: {', '.join(still_running)}\n{thread_stacks(stuck)}",
                  flush=True)
        self.placement.remove()

    def _rollout_source(self, model_path: str):
        """Agent episodes through the router when an agent is configured, else one completion per sample."""
        if self.cfg.agent.name:
            return AgentRolloutSource(self.cfg, self.prompts, self.rollout, model_path)
        rewards = RewardPool(self.cfg.data.reward, self.cfg.data.num_reward_workers)
        return SyncRolloutSource(self.cfg.rollout, self.prompts, self.rollout, rewards, self.cfg.run.seed)

    def _warm_start(self, monitor: Monitor, stop: Callable[[], bool], abandon: Callable[[], bool]) -> None:
        ws = self.cfg.warm_start
        items = list(get_data_source(ws.source)(**ws.options))
        samples = call_interruptibly(lambda: self.source.demonstrations(items), stop, "recording the demonstrations")
        print(f"[loongsage] warm start: {len(samples)} demonstrations from {ws.source}", flush=True)

        def log(update: int, metrics: dict[str, float]) -> None:
            monitor.scalars(update, {"warm_start/nll": metrics["train/loss"], "warm_start/grad_norm": metrics["train/grad_norm"]})

        call_interruptibly(lambda: warm_start(samples, ws, self.trainer.supervised_step, self.cfg.run.seed, log),
                           abandon, "the warm start", trainer_busy=True)
        call_interruptibly(self._sync_weights, abandon, "the weight sync after the warm start", trainer_busy=True)

    def _one_step(self, stop: Callable[[], bool], abandon: Callable[[], bool]) -> tuple[list[Sample], dict[str, float]]:
        """Step `self.step + 1`; StepInterrupted (nothing trained) when `stop()` turns true while
        its batch is still being rolled out, or `abandon()` while it trains or syncs weights."""
        step = self.step + 1
        started = time.perf_counter()
        if self.async_rollout is not None:
            samples, pipeline_metrics = self.async_rollout.take(self.weight_version, stop)
        else:
            samples = call_interruptibly(lambda: self.source.next_batch(step), stop, f"the rollout of step {step}")
            pipeline_metrics = {}
        rolled_out = time.perf_counter()
        # Episodes that failed because their engine died would train as zero-reward noise.
        self._stop_if_engines_died()
        self._assign_advantages(samples)
        metrics = call_interruptibly(lambda: self.trainer.train_step(samples, policy_version=self.weight_version),
                                     abandon, f"training step {step}", trainer_busy=True)
        trained = time.perf_counter()
        call_interruptibly(self._sync_weights, abandon, f"the weight sync of step {step}", trainer_busy=True)
        synced = time.perf_counter()
        metrics.update(rollout_metrics(samples))
        metrics.update(pipeline_metrics)
        metrics.update(
            {
                # Waiting for the batch: in the asynchronous modes only what rollout did not hide.
                "timing/rollout_s": rolled_out - started,
                "timing/train_s": trained - rolled_out,
                "timing/weight_sync_s": synced - trained,
                "timing/step_s": synced - started,
                "rollout/weight_version": float(self.weight_version),
                "async/trainer_idle_ratio": 1.0 - (trained - rolled_out) / max(synced - started, 1e-9),
                "async/rollout_idle_ratio": self._idle_clock.lap(),
            }
        )
        return samples, metrics

    def _stop_if_engines_died(self, cause: Exception | None = None) -> None:
        dead = self.rollout.dead_engines()
        if dead:
            raise EngineDied(dead, self.step + 1, latest_checkpoint(self.run_dir), cause) from None

    def _assign_advantages(self, samples: list[Sample]) -> None:
        """GRPO over episodes: an agent trajectory exported as several samples (branches)
        counts once in its group's statistics, and every one of its samples gets its advantage."""
        episodes = [s.metadata.get("trajectory_id", index) for index, s in enumerate(samples)]
        first: dict = {}
        for episode, sample in zip(episodes, samples):
            first.setdefault(episode, sample)
        rewards = torch.tensor([s.reward for s in first.values()], dtype=torch.float32)
        groups = torch.tensor([s.group_id for s in first.values()])
        advantages = grouped_advantages(rewards, groups, normalize_std=self.cfg.algorithm.normalize_std)
        by_episode = dict(zip(first, advantages.tolist()))
        for sample, episode in zip(samples, episodes):
            sample.advantage = by_episode[episode]

    def _sync_weights(self) -> None:
        self.weight_version += 1

        def push() -> None:
            self.trainer.push_weights(self.rollout.urls, self.weight_version)

        if self.async_rollout is not None:
            self.async_rollout.update_weights(push)
        else:
            push()
        self.source.on_weights_updated(self.weight_version)

    def _save(self, prompts_state: dict | None = None) -> None:
        """`prompts_state`: the stream's position after the last trained step, where the stream has
        since moved on for a rollout that was given up (synchronous mode)."""
        state = {"step": self.step, "weight_version": self.weight_version, "warm_started": self._warm_started,
                 "prompts": prompts_state or self.prompts.state_dict(), "pending": []}
        if self.async_rollout is not None:
            # Rollout runs ahead of training: the stream's position alone would skip what is in flight.
            state.update(self.async_rollout.checkpoint_state())
        save_checkpoint(self.run_dir, self.step, state, self.trainer.save_checkpoint)
        self._saved_step = self.step

    def _stop_here(self, interrupted: StepInterrupted, prompts_state: dict | None) -> None:
        """The checkpoint a stopping run resumes from, unless its last step was just saved, it has
        not trained at all (a finished warm start counts: step 0 with the warm-started weights), or
        the trainer was stopped in the middle of an update (then the last checkpoint stands)."""
        started = time.perf_counter()
        trained = self.step > 0 or self._warm_started
        if interrupted.trainer_busy:
            checkpoint = latest_checkpoint(self.run_dir)
            kept = f"the last checkpoint is {checkpoint}" if checkpoint else "no checkpoint yet: the run starts over"
            print(f"[loongsage] stopping at step {self.step}: {interrupted}, nothing saved ({kept}; "
                  f"SIGTERM instead of Ctrl-C finishes the step in progress and saves it)", flush=True)
            return
        if not trained:
            print("[loongsage] stopping before training: nothing to save", flush=True)
            return
        if self._saved_step != self.step:
            self._save(prompts_state)
        print(f"[loongsage] stopping at step {self.step}: checkpoint written in {time.perf_counter() - started:.1f} s", flush=True)

    def _resume_if_possible(self) -> None:
        checkpoint = latest_checkpoint(self.run_dir)
        if checkpoint is None:
            if self.cfg.run.resume:
                raise FileNotFoundError(f"run.resume=true but {self.run_dir} holds no checkpoint to resume from")
            return
        state = load_controller_state(checkpoint)
        self.trainer.load_checkpoint(str(checkpoint / "trainer"))
        self.step = self._saved_step = state["step"]
        # Checkpoints from before the field existed are all of trained steps, after any warm start.
        self._warm_started = state.get("warm_started", True)
        self.weight_version = state["weight_version"]
        self.prompts.load_state_dict(state["prompts"])
        self._pending_items = state.get("pending", [])
        if self._pending_items and self.cfg.run.mode == "sync":
            print(f"[loongsage] warning: {len(self._pending_items)} prompts an asynchronous run had taken but not trained "
                  f"are not replayed in run.mode=sync", flush=True)
        # The engines start from the base model; give them the checkpoint's weights.
        self.trainer.push_weights(self.rollout.urls, self.weight_version)
        print(f"[loongsage] resumed from {checkpoint} at step {self.step}", flush=True)
