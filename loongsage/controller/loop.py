"""The controller's loop: prompts -> rollout -> reward -> advantages -> train -> weight sync."""
from __future__ import annotations

import time
from pathlib import Path

import torch

from loongsage.algorithms.advantages import grpo_advantages
from loongsage.config import Config
from loongsage.controller.checkpoint import latest_checkpoint, load_controller_state, save_checkpoint
from loongsage.controller.metrics import rollout_metrics
from loongsage.controller.monitor import Monitor
from loongsage.controller.prompts import PromptStream
from loongsage.controller.rewards import RewardPool
from loongsage.controller.rollout import RolloutGroup
from loongsage.controller.sync_rollout import SyncRolloutSource
from loongsage.models import load_tokenizer, resolve_model_path
from loongsage.sample import Sample
from loongsage.training.group import TrainGroup


class Controller:
    def __init__(self, cfg: Config, run_dir: Path):
        self.cfg = cfg
        self.run_dir = run_dir
        model_path = str(resolve_model_path(cfg.model.name))
        self.prompts = PromptStream(cfg.data, load_tokenizer(model_path), cfg.run.seed)
        self.rollout = RolloutGroup(cfg.rollout, model_path)
        self.trainer = TrainGroup(model_path, cfg.trainer, cfg.algorithm, cfg.run.seed)
        self.rewards = RewardPool(cfg.data.reward, cfg.data.num_reward_workers)
        self.source = SyncRolloutSource(cfg.rollout, self.prompts, self.rollout, self.rewards, cfg.run.seed)
        self.step = 0
        self.weight_version = 0
        self._resume_if_possible()

    def run(self) -> None:
        monitor = Monitor(self.cfg.logging, self.run_dir, self.cfg.run.steps, self.step)
        try:
            while self.step < self.cfg.run.steps:
                self.step += 1
                samples, metrics = self._one_step()
                monitor.log(self.step, metrics, samples)
                if self.step % self.cfg.run.save_every == 0 or self.step == self.cfg.run.steps:
                    self._save()
        finally:
            monitor.close()

    def shutdown(self) -> None:
        self.rollout.shutdown()
        self.trainer.shutdown()

    def _one_step(self) -> tuple[list[Sample], dict[str, float]]:
        started = time.perf_counter()
        samples = self.source.next_batch(self.step)
        rolled_out = time.perf_counter()
        self._assign_advantages(samples)
        metrics = self.trainer.train_step(samples)
        trained = time.perf_counter()
        self._sync_weights()
        synced = time.perf_counter()
        metrics.update(rollout_metrics(samples, self.cfg.rollout.group_size))
        metrics.update(
            {
                "timing/rollout_s": rolled_out - started,
                "timing/train_s": trained - rolled_out,
                "timing/weight_sync_s": synced - trained,
                "timing/step_s": synced - started,
                "rollout/weight_version": float(self.weight_version),
            }
        )
        return samples, metrics

    def _assign_advantages(self, samples: list[Sample]) -> None:
        rewards = torch.tensor([s.reward for s in samples], dtype=torch.float32)
        advantages = grpo_advantages(rewards, self.cfg.rollout.group_size, normalize_std=self.cfg.algorithm.normalize_std)
        for sample, advantage in zip(samples, advantages.tolist()):
            sample.advantage = advantage

    def _sync_weights(self) -> None:
        self.weight_version += 1
        self.trainer.push_weights(self.rollout.urls, self.weight_version)
        self.source.on_weights_updated(self.weight_version)

    def _save(self) -> None:
        state = {"step": self.step, "weight_version": self.weight_version, "prompts": self.prompts.state_dict()}
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
        # The engines start from the base model; give them the checkpoint's weights.
        self.trainer.push_weights(self.rollout.urls, self.weight_version)
        print(f"[loongsage] resumed from {checkpoint} at step {self.step}", flush=True)
