"""The controller's loop: prompts -> rollout -> reward -> advantages -> train -> weight sync."""
from __future__ import annotations

import time
from pathlib import Path

import torch

from loongsage.algorithms.advantages import grouped_advantages
from loongsage.cluster.cpu_placement import resolve_placement, split_cores
from loongsage.config import Config
from loongsage.controller.agent_rollout import AgentRolloutSource
from loongsage.controller.async_rollout import AsyncRollout
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


class Controller:
    def __init__(self, cfg: Config, run_dir: Path):
        self.cfg = cfg
        self.run_dir = run_dir
        model_path = str(resolve_model_path(cfg.model.name))
        self.prompts = prompt_stream(cfg.data, load_tokenizer(model_path), cfg.run.seed)
        placement = resolve_placement(cfg.run.placement, cfg.run.mode)
        trainer_cpus, engine_cpus = split_cores(placement, cfg.trainer.world_size, cfg.rollout.num_engines)
        self.rollout = RolloutGroup(cfg.rollout, model_path, engine_cpus)
        self.trainer = TrainGroup(model_path, cfg.trainer, cfg.algorithm, cfg.run.seed, cpus=trainer_cpus)
        self.source = self._rollout_source(model_path)
        self.step = 0
        self.weight_version = 0
        self.async_rollout: AsyncRollout | None = None  # one_step_off / fully_async, started by run()
        self._pending_items: list = []  # taken by an asynchronous run's rollout, not trained when it saved
        self._resume_if_possible()

    def run(self) -> None:
        monitor = Monitor(self.cfg.logging, self.run_dir, self.cfg.run.steps, self.step)
        try:
            if self.step == 0 and self.cfg.warm_start.source:
                self._warm_start(monitor)
                monitor.start_clock()
            if self.cfg.run.mode != "sync" or self.cfg.pipeline.filter_zero_variance:
                first_group = self.step * self.cfg.rollout.prompts_per_step
                self.async_rollout = AsyncRollout(self.cfg, self.source, self.rollout, first_group, self._pending_items)
            self._idle_clock = IdleClock(self.rollout.activity)
            while self.step < self.cfg.run.steps:
                self.step += 1
                samples, metrics = self._one_step()
                monitor.log(self.step, metrics, samples)
                if self.step % self.cfg.run.save_every == 0 or self.step == self.cfg.run.steps:
                    self._save()
        finally:
            monitor.close()

    def shutdown(self) -> None:
        if self.async_rollout is not None:
            self.async_rollout.close()
        self.source.close()
        self.rollout.shutdown()
        self.trainer.shutdown()

    def _rollout_source(self, model_path: str):
        """Agent episodes through the router when an agent is configured, else one completion per sample."""
        if self.cfg.agent.name:
            return AgentRolloutSource(self.cfg, self.prompts, self.rollout, model_path)
        rewards = RewardPool(self.cfg.data.reward, self.cfg.data.num_reward_workers)
        return SyncRolloutSource(self.cfg.rollout, self.prompts, self.rollout, rewards, self.cfg.run.seed)

    def _warm_start(self, monitor: Monitor) -> None:
        ws = self.cfg.warm_start
        samples = self.source.demonstrations(list(get_data_source(ws.source)(**ws.options)))
        print(f"[loongsage] warm start: {len(samples)} demonstrations from {ws.source}", flush=True)

        def log(update: int, metrics: dict[str, float]) -> None:
            monitor.scalars(update, {"warm_start/nll": metrics["train/loss"], "warm_start/grad_norm": metrics["train/grad_norm"]})

        warm_start(samples, ws, self.trainer.supervised_step, self.cfg.run.seed, log)
        self._sync_weights()

    def _one_step(self) -> tuple[list[Sample], dict[str, float]]:
        started = time.perf_counter()
        if self.async_rollout is not None:
            samples, pipeline_metrics = self.async_rollout.take(self.weight_version)
        else:
            samples, pipeline_metrics = self.source.next_batch(self.step), {}
        rolled_out = time.perf_counter()
        self._assign_advantages(samples)
        metrics = self.trainer.train_step(samples, policy_version=self.weight_version)
        trained = time.perf_counter()
        self._sync_weights()
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

    def _save(self) -> None:
        state = {"step": self.step, "weight_version": self.weight_version, "prompts": self.prompts.state_dict(), "pending": []}
        if self.async_rollout is not None:
            # Rollout runs ahead of training: the stream's position alone would skip what is in flight.
            state.update(self.async_rollout.checkpoint_state())
        save_checkpoint(self.run_dir, self.step, state, self.trainer.save_checkpoint)

    def _resume_if_possible(self) -> None:
        checkpoint = latest_checkpoint(self.run_dir)
        if checkpoint is None:
            if self.cfg.run.resume:
                raise FileNotFoundError(f"run.resume=true but {self.run_dir} holds no checkpoint to resume from")
            return
        state = load_controller_state(checkpoint)
        self.trainer.load_checkpoint(str(checkpoint / "trainer"))
        self.step = state["step"]
        self.weight_version = state["weight_version"]
        self.prompts.load_state_dict(state["prompts"])
        self._pending_items = state.get("pending", [])
        if self._pending_items and self.cfg.run.mode == "sync":
            print(f"[loongsage] warning: {len(self._pending_items)} prompts an asynchronous run had taken but not trained "
                  f"are not replayed in run.mode=sync", flush=True)
        # The engines start from the base model; give them the checkpoint's weights.
        self.trainer.push_weights(self.rollout.urls, self.weight_version)
        print(f"[loongsage] resumed from {checkpoint} at step {self.step}", flush=True)
