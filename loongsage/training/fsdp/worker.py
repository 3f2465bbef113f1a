"""One data-parallel rank of the HF trainer: model, optimizer and the train step.

A plain class: TrainGroup runs one per rank as a Ray actor; tests and benchmarks may use
it in-process. `setup()` joins the gloo process group, so every rank of a group must
call it concurrently.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import torch
import torch.distributed as dist
from torch import Tensor

from loongsage.algorithms.critic import reads_critic
from loongsage.algorithms.losses import token_logprobs
from loongsage.cluster.hosts import ray_gpu_ids
from loongsage.failpoints import die_here_if_asked
from loongsage.models import hf_config, import_causal_lm_code, is_mixture_of_experts, load_causal_lm
from loongsage.sample import Sample
from loongsage.training.batch import PackedBatch, pack_samples, split_even, split_micro_batches
from loongsage.training.checkpoint_dir import CRITIC_DIR
from loongsage.training.fsdp import checkpoint
from loongsage.training.fsdp.critic import Critic
from loongsage.training.fsdp.optim import build_optimizer
from loongsage.training.fsdp.parallel import (
    clip_grad_norm,
    full_weights_in_lockstep,
    grad_sync,
    tied_parameter_names,
    wrap_model,
)
from loongsage.training.fsdp.router_replay import HfRouting
from loongsage.training.load_balancing import layers_load_balancing_loss
from loongsage.training.metrics import StepMetrics
from loongsage.training.objective import check_off_policy_inputs, micro_objective, stale_threshold, supervised_objective
from loongsage.training.rank_process import (
    TrainRank,
    join_process_group,
    leave_process_group,
)
from loongsage.training.router_settings import refuse_without_experts
from loongsage.training.routing_replay import RoutingCount, check_routes
from loongsage.training.shares import global_shares
from loongsage.training.stale_mask import m2po_masked
from loongsage.training.token_scores import FullVocabScores
from loongsage.transfer.source_routes import SourceReport


class TrainWorker(TrainRank):
    def gpu_ids(self) -> list:
        """The GPU ids Ray gave this rank (diagnostics: did placement put it on its seat)."""
        return ray_gpu_ids()

    def warm_up(self) -> None:
        """transformers' model code, which `load_causal_lm` would import on its first call."""
        import_causal_lm_code(self.model_path)

    def setup(self, master_addr: str, master_port: int) -> None:
        experts = is_mixture_of_experts(self.model_path)
        refuse_without_experts(self.trainer.moe, hf_config(self.model_path)["model_type"], experts)  # before joining
        join_process_group(master_addr, master_port, self.rank, self.trainer.world_size)
        dtype = self.dtype
        model = load_causal_lm(self.model_path, dtype=dtype)
        if self.trainer.gradient_checkpointing:
            _enable_activation_checkpointing(model)
        self.tied_names = tied_parameter_names(model)
        self.routing = HfRouting(model) if experts else None
        self.aux_loss_coeff = self._aux_loss_coeff(model.config) if experts else 0.0
        self.top_k = model.config.num_experts_per_tok if experts else 0
        _freeze_routers(model, self.trainer.moe.freeze_router)
        self.model = wrap_model(model, self.trainer.strategy)
        self.optimizer, self.scheduler = build_optimizer(self.model, self.trainer)
        self.ref_model = self._reference_model(dtype) if self.algo.kl_coef > 0 else None
        self.critic = (
            Critic(self.model_path, self.trainer, dtype, self.algo.value_clip) if reads_critic(self.algo.advantage) else None
        )

    def data_rank(self) -> int:
        """Every rank of this backend is a data-parallel rank of its own."""
        return self.rank

    def close(self) -> None:
        leave_process_group()

    def train_step(self, samples: list[Sample], policy_version: int | None = None) -> dict[str, float]:
        """`policy_version`: the weight version the trainer's weights are at the start of the
        step (read by algorithm.proximal=interpolate)."""
        check_off_policy_inputs(samples, self.algo, policy_version)
        check_routes(samples, self.algo.routing_replay)
        minis = [
            [pack_samples(chunk) for chunk in split_micro_batches(mini, self.trainer.micro_batch_size)]
            for mini in split_even(samples, self.trainer.mini_batches, "trainer.mini_batches")
        ]
        # With a single optimizer step the batch is on-policy for the current weights, and
        # the update's own forward pass yields the old logprobs (see micro_objective).
        # Otherwise recompute takes them all now, before the first update moves the weights;
        # behaviour and interpolate need no such pass (sparing it is interpolate's point).
        # M2PO cuts over the whole batch, so it needs every proximal logprob before the first update.
        recompute = (len(minis) > 1 or self.algo.stale_filter == "m2po") and self.algo.proximal == "recompute"
        olds = [self._logprobs(self.model, mini) if recompute else None for mini in minis]
        refs = [self._logprobs(self.ref_model, mini) if self.ref_model is not None else None for mini in minis]
        lr = self.scheduler.get_last_lr()[0]
        sums = StepMetrics(
            with_kl=self.ref_model is not None, with_is=self.algo.is_level != "none", with_stale=self.algo.stale_filter != "none"
        )
        if self.algo.stale_filter == "m2po":
            minis, masked = m2po_masked(minis, olds, stale_threshold(self.algo))
            sums.add_stale_masked(masked)
        die_here_if_asked("train_step", self.step + 1, self.rank)
        value_losses = []
        for index, (mini, old, ref) in enumerate(zip(minis, olds, refs)):
            # Mini-batch k trains weights k / len(minis) of the way to the next version.
            versions = None if policy_version is None else (policy_version, policy_version + index / len(minis))
            self._optimizer_step(mini, old, ref, sums, policy_versions=versions)
            if self.critic is not None:
                value_losses.append(self.critic.update(mini))
        self.scheduler.step()
        self.step += 1
        metrics = sums.reduce(num_minis=len(minis), lr=lr)
        if self.critic is not None:
            self.critic.scheduler.step()
            metrics["train/value_loss"] = sum(value_losses) / len(value_losses)
        return metrics

    def supervised_step(self, samples: list[Sample], lr: float) -> dict[str, float]:
        """One optimizer step on the NLL of the samples' masked tokens, at `lr`, outside the RL
        learning-rate schedule (which neither moves nor counts it)."""
        micros = [pack_samples(chunk) for chunk in split_micro_batches(samples, self.trainer.micro_batch_size)]
        sums = StepMetrics(with_kl=False)
        scheduled = [group["lr"] for group in self.optimizer.param_groups]
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        try:
            self._optimizer_step(micros, None, None, sums, supervised=True)
        finally:
            for group, value in zip(self.optimizer.param_groups, scheduled):
                group["lr"] = value
        return sums.reduce(num_minis=1, lr=lr)

    @torch.no_grad()
    def compute_logprobs(self, samples: list[Sample]) -> list[list[float]]:
        micros = [pack_samples(chunk) for chunk in split_micro_batches(samples, self.trainer.micro_batch_size)]
        logprobs = self._logprobs(self.model, micros)
        return [values for micro, lp in zip(micros, logprobs) for values in micro.response_values(lp)]

    @torch.no_grad()
    def compute_values(self, samples: list[Sample]) -> list[list[float]]:
        """The critic's value of every response token of this rank's shard."""
        if self.critic is None:
            raise ValueError("compute_values needs a critic: this trainer's algorithm.advantage reads none")
        micros = [pack_samples(chunk) for chunk in split_micro_batches(samples, self.trainer.micro_batch_size)]
        return [values for micro, v in zip(micros, self.critic.values(micros)) for values in micro.response_values(v)]

    def save_checkpoint(self, path: str) -> None:
        checkpoint.save_rank(
            Path(path),
            rank=self.rank,
            world_size=self.trainer.world_size,
            step=self.step,
            model=self.model,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            tied_names=self.tied_names,
            source_dir=self.model_path,
        )
        if self.critic is not None:
            checkpoint.save_rank(
                Path(path) / CRITIC_DIR,
                rank=self.rank,
                world_size=self.trainer.world_size,
                step=self.step,
                model=self.critic.model,
                optimizer=self.critic.optimizer,
                scheduler=self.critic.scheduler,
                tied_names=set(),
                source_dir=self.model_path,
            )

    def load_checkpoint(self, path: str) -> int:
        self.step = checkpoint.load_rank(
            Path(path),
            rank=self.rank,
            world_size=self.trainer.world_size,
            model=self.model,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
        )
        if self.critic is not None:
            if not (Path(path) / CRITIC_DIR).is_dir():
                raise FileNotFoundError(f"checkpoint {path} has no {CRITIC_DIR}/: it was saved by a run without a critic")
            checkpoint.load_rank(
                Path(path) / CRITIC_DIR,
                rank=self.rank,
                world_size=self.trainer.world_size,
                model=self.critic.model,
                optimizer=self.critic.optimizer,
                scheduler=self.critic.scheduler,
            )
        return self.step

    def push_weights(self, plan: dict, engine_urls: list[str], skip: list[str]) -> SourceReport | None:
        """Collective: every rank gathers each full tensor in turn; the plan's sources send."""
        named = full_weights_in_lockstep(self.model, self.tied_names)
        return self.send_to_engines(named, plan, engine_urls, skip)

    def _optimizer_step(
        self,
        micros: list[PackedBatch],
        olds: list[Tensor] | None,
        refs: list[Tensor] | None,
        sums: StepMetrics,
        supervised: bool = False,
        policy_versions: tuple[float, float] | None = None,
    ) -> None:
        self.model.train()
        weights = global_shares(micros, "token_mean" if supervised else self.algo.loss_aggregation)
        token_weights = global_shares(micros, "token_mean")
        routing = RoutingCount()
        for index, micro in enumerate(micros):
            old = olds[index] if olds else None
            with grad_sync(self.model, enabled=index == len(micros) - 1), self._engine_routes(micro, routing):
                out = self._forward(self.model, micro, router_logits=self.aux_loss_coeff > 0)
                scores = FullVocabScores(out.logits[:, :-1])
                result = (
                    supervised_objective(scores, micro)
                    if supervised
                    else micro_objective(scores, micro, old, refs[index] if refs else None, self.algo, policy_versions)
                )
                # Ranks' gradients are averaged, so each rank scales by world_size to end
                # with the global-batch loss, not the mean of per-rank losses.
                loss = result.loss * (weights[index] * dist.get_world_size())
                if self.aux_loss_coeff > 0:
                    # megatron's weighing: each micro-batch's routers' loss by 1/M (load_balancing.py)
                    balance = layers_load_balancing_loss(out.router_logits, micro.attention_mask, self.top_k)
                    loss = loss + self.aux_loss_coeff * balance / len(micros)
                loss.backward()
            sums.add_micro(micro, result, old, weights[index], token_weights[index])
        sums.add_routing(routing)
        sums.grad_norm += clip_grad_norm(self.model, self.trainer.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    @torch.no_grad()
    def _logprobs(self, model: torch.nn.Module, micros: list[PackedBatch]) -> list[Tensor]:
        model.eval()
        logprobs = []
        for micro in micros:
            # The policy replays the engine's routing here too (recompute); the reference model never.
            with self._engine_routes(micro) if model is self.model else nullcontext():
                logprobs.append(token_logprobs(self._forward(model, micro).logits[:, :-1], micro.targets))
        return logprobs

    def _engine_routes(self, micro: PackedBatch, count: RoutingCount | None = None):
        if self.routing is None:
            return nullcontext()
        return self.routing.engine_routes(micro.routed_experts, self.algo.routing_replay, count)

    @staticmethod
    def _forward(model: torch.nn.Module, micro: PackedBatch, router_logits: bool = False):
        """transformers' output: `logits` (of the positions from micro.logits_to_keep on) and,
        when asked, each MoE layer's `router_logits` [B * T, E]."""
        return model(
            input_ids=micro.input_ids,
            attention_mask=micro.attention_mask,
            position_ids=micro.position_ids,
            use_cache=False,
            logits_to_keep=micro.logits_to_keep,
            **(dict(output_router_logits=True) if router_logits else {}),
        )

    def _aux_loss_coeff(self, config) -> float:
        """trainer.moe.aux_loss_coeff, else the checkpoint's router_aux_loss_coef (as megatron reads it)."""
        configured = self.trainer.moe.aux_loss_coeff
        return float(config.router_aux_loss_coef if configured is None else configured)

    def _reference_model(self, dtype: torch.dtype) -> torch.nn.Module:
        """A frozen copy of the starting weights; later checkpoint loads never touch it."""
        ref = load_causal_lm(self.model_path, dtype=dtype)
        ref.requires_grad_(False)
        return ref


def _freeze_routers(model: torch.nn.Module, freeze: bool) -> None:
    """trainer.moe.freeze_router: each MoE layer's router (`mlp.gate`, transformers' Qwen2/3-MoE)
    takes no gradient, so the optimizer never moves it; the shared expert's gate is not a router."""
    if not freeze:
        return
    for layer in model.model.layers:
        if hasattr(layer.mlp, "experts"):
            layer.mlp.gate.requires_grad_(False)


def _enable_activation_checkpointing(model: torch.nn.Module) -> None:
    # Recent transformers renamed gradient_checkpointing_enable and deprecated the old name.
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
