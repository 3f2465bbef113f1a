"""One rank of the Megatron trainer: megatron-core's GPTModel, DDP and optimizer, driven by
its forward-backward schedule, training the same objective as the HF backend.

A plain class: TrainGroup runs tp * pp * dp of them as Ray actors (mixtures of experts: the
experts split over trainer.megatron.ep of them); tests may use it in-process.
Every method but `rendezvous_address` is collective over all ranks.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import torch
import torch.distributed as dist
from torch import Tensor

from loongsage.algorithms.critic import reads_critic
from loongsage.cluster.hosts import this_host
from loongsage.failpoints import die_here_if_asked
from loongsage.models import hf_config
from loongsage.sample import Sample
from loongsage.training.batch import PackedBatch, pack_samples, split_even, split_micro_batches
from loongsage.training.checkpoint_dir import CRITIC_DIR
from loongsage.training.lr_schedule import Warmup
from loongsage.training.megatron import checkpoint, cpu_shims
from loongsage.training.megatron.convert import holds_full_weights, host_weights, load_hf_weights
from loongsage.training.megatron.critic import MegatronCritic
from loongsage.training.megatron.mapping import model_spec, with_aux_loss_coeff
from loongsage.training.megatron.model import build_model, gpt_model, sequence_multiple
from loongsage.training.megatron.optim import build_optimizer, set_lr, wrap_ddp
from loongsage.training.megatron.parallel import destroy_model_parallel, init_model_parallel
from loongsage.training.megatron.router_replay import MegatronRouting
from loongsage.training.megatron.schedule import run_micro_batches
from loongsage.training.metrics import StepMetrics
from loongsage.training.objective import check_off_policy_inputs, micro_objective, stale_threshold, supervised_objective
from loongsage.training.rank_process import (
    TrainRank,
    join_process_group,
    leave_process_group,
)
from loongsage.training.router_settings import refuse_without_experts
from loongsage.training.routing_replay import RoutingCount, check_routes
from loongsage.training.settings import train_ranks
from loongsage.training.shares import global_shares
from loongsage.training.stale_mask import m2po_masked
from loongsage.transfer.source_routes import SourceReport

ROUTER_WEIGHT = ".mlp.router.weight"  # megatron's name of each MoE layer's router (weight_layout.moe_rules)


class MegatronWorker(TrainRank):
    def setup(self, master_addr: str, master_port: int) -> None:
        spec = model_spec(hf_config(self.model_path))
        refuse_without_experts(self.trainer.moe, spec.family, spec.is_moe)  # before any rank waits for the others
        self.spec = with_aux_loss_coeff(spec, self.trainer.moe.aux_loss_coeff)
        join_process_group(master_addr, master_port, self.rank, train_ranks(self.trainer), cpu_shims.collective_backend())
        self.layout = init_model_parallel(self.trainer.megatron, self.seed)
        policy = self._trainable(self._load_model())
        self.routing = MegatronRouting(policy) if self.spec.is_moe else None
        self.model = wrap_ddp(policy, self.trainer.megatron)
        self.optimizer = build_optimizer(self.model, self.trainer, self.trainer.megatron)
        self.warmup = Warmup(self.trainer.warmup_steps)
        self.ref_model = self._load_model().requires_grad_(False) if self.algo.kl_coef > 0 else None
        self.critic = MegatronCritic(self, self.algo.value_clip) if reads_critic(self.algo.advantage) else None

    def data_rank(self) -> int:
        return self.layout.dp_rank

    def close(self) -> None:
        destroy_model_parallel()
        leave_process_group()

    def train_step(self, samples: list[Sample], policy_version: int | None = None) -> dict[str, float]:
        """As the HF backend's (loongsage.training.fsdp.worker): mini-batches, each one optimizer
        step; `policy_version` is read by algorithm.proximal=interpolate."""
        check_off_policy_inputs(samples, self.algo, policy_version)
        check_routes(samples, self.algo.routing_replay)
        minis = [self._pack(mini) for mini in split_even(samples, self.trainer.mini_batches, "trainer.mini_batches")]
        # Why recompute is skipped for a single mini-batch: see the HF backend's train_step.
        recompute = (len(minis) > 1 or self.algo.stale_filter == "m2po") and self.algo.proximal == "recompute"
        olds = [self._logprobs(self.model, mini) if recompute else None for mini in minis]
        refs = [self._logprobs(self.ref_model, mini) if self.ref_model is not None else None for mini in minis]
        lr = self.trainer.lr * self.warmup(self.step)
        set_lr(self.optimizer, lr)
        sums = self._step_metrics(
            with_kl=self.ref_model is not None, with_is=self.algo.is_level != "none", with_stale=self.algo.stale_filter != "none"
        )
        if self.algo.stale_filter == "m2po" and self.layout.is_last_stage:  # only the last stage has logprobs
            minis, masked = m2po_masked(minis, olds, stale_threshold(self.algo), self.layout.dp_cpu_group)
            sums.add_stale_masked(masked)
        die_here_if_asked("train_step", self.step + 1, self.rank)
        value_losses = []
        for index, (mini, old, ref) in enumerate(zip(minis, olds, refs)):
            versions = None if policy_version is None else (policy_version, policy_version + index / len(minis))
            self._optimizer_step(mini, old, ref, sums, policy_versions=versions)
            if self.critic is not None:
                value_losses.append(self.critic.update(mini, lr_scale=self.warmup(self.step)))
        self.step += 1
        metrics = sums.reduce(num_minis=len(minis), lr=lr)
        if self.critic is not None:
            metrics["train/value_loss"] = sum(value_losses) / len(value_losses)
        return self._from_last_stage(metrics)

    def supervised_step(self, samples: list[Sample], lr: float) -> dict[str, float]:
        """One optimizer step on the NLL of the masked tokens at `lr`, outside the RL schedule."""
        sums = self._step_metrics(with_kl=False)
        set_lr(self.optimizer, lr)
        self._optimizer_step(self._pack(samples), None, None, sums, supervised=True)
        return self._from_last_stage(sums.reduce(num_minis=1, lr=lr))

    def compute_logprobs(self, samples: list[Sample]) -> list[list[float]]:
        micros = self._pack(samples)
        logprobs = self._logprobs(self.model, micros)
        if not self.layout.is_last_stage:
            return self._from_last_stage(None)
        return self._from_last_stage([values for micro, lp in zip(micros, logprobs) for values in micro.response_values(lp)])

    def compute_values(self, samples: list[Sample]) -> list[list[float]]:
        """The critic's value of every response token of this rank's shard."""
        if self.critic is None:
            raise ValueError("compute_values needs a critic: this trainer's algorithm.advantage reads none")
        micros = self._pack(samples)
        values = self.critic.values(micros)
        if not self.layout.is_last_stage:
            return self._from_last_stage(None)
        return self._from_last_stage([row for micro, v in zip(micros, values) for row in micro.response_values(v)])

    def save_checkpoint(self, path: str) -> None:
        checkpoint.save(Path(path), self)
        if self.critic is not None:
            self.critic.save(Path(path) / CRITIC_DIR, self.step)

    def load_checkpoint(self, path: str) -> int:
        self.step = checkpoint.load(Path(path), self)
        if self.critic is not None:
            if not (Path(path) / CRITIC_DIR).is_dir():
                raise FileNotFoundError(f"checkpoint {path} has no {CRITIC_DIR}/: it was saved by a run without a critic")
            self.critic.load(Path(path) / CRITIC_DIR)
        return self.step

    def weight_source(self) -> str | None:
        return this_host() if holds_full_weights() else None

    def push_weights(self, plan: dict, engine_urls: list[str], skip: list[str]) -> SourceReport | None:
        """Collective: each replica gathers every tensor onto its first rank; the plan's sources send."""
        named = host_weights(self.model.module, self.spec, every_replica=True)
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
        group = self.layout.dp_cpu_group
        weights = global_shares(micros, "token_mean" if supervised else self.algo.loss_aggregation, group)
        token_weights = global_shares(micros, "token_mean", group)

        def on_scores(index: int, micro: PackedBatch, scores) -> Tensor:
            old = olds[index] if olds else None
            if supervised:
                result = supervised_objective(scores, micro)
            else:
                result = micro_objective(scores, micro, old, refs[index] if refs else None, self.algo, policy_versions)
            sums.add_micro(micro, result, old, weights[index], token_weights[index])
            # megatron's DDP averages gradients over data-parallel ranks; each rank scales by
            # their number to end with the global-batch loss, as the HF backend does.
            return result.loss * (weights[index] * self.layout.dp_size)

        self.model.train()
        self.model.zero_grad_buffer()
        self.optimizer.zero_grad()
        routing = RoutingCount()
        run_micro_batches(
            self.model, micros, self.layout, on_scores, forward_only=False, around_forward=self._engine_routes(routing)
        )
        sums.add_routing(self._over_model_parallel(routing))
        with cpu_shims.cuda_literals_on_cpu():
            _, grad_norm, _ = self.optimizer.step()
        sums.grad_norm += float(grad_norm)

    @torch.no_grad()
    def _logprobs(self, model, micros: list[PackedBatch]) -> list[Tensor]:
        model.eval()
        logprobs: list[Tensor | None] = [None] * len(micros)

        def on_scores(index: int, micro: PackedBatch, scores) -> Tensor:
            logprobs[index] = scores.logprobs(micro.targets)
            return logprobs[index].sum()

        # The policy replays the engine's routing here too (recompute); the reference model never.
        around = self._engine_routes() if model is self.model else lambda _micro: nullcontext()
        run_micro_batches(model, micros, self.layout, on_scores, forward_only=True, around_forward=around)
        return logprobs

    def _pack(self, samples: list[Sample]) -> list[PackedBatch]:
        chunks = split_micro_batches(samples, self.trainer.micro_batch_size)
        multiple = sequence_multiple(self.layout.tp_size)
        widths = [-(-max(sample.num_tokens for sample in chunk) // multiple) * multiple for chunk in chunks]
        if self.layout.ep_size > 1:
            widths = self._expert_group_widths(widths)
        if self.layout.pp_size > 1:
            # Pipeline stages hand each other activations of one fixed shape: pad every micro-batch alike.
            widths = [max(widths)] * len(widths)
        return [pack_samples(chunk, width).to(cpu_shims.device()) for chunk, width in zip(chunks, widths)]

    def _expert_group_widths(self, widths: list[int]) -> list[int]:
        """Each micro-batch padded to the widest of its index over the data-parallel ranks.

        Under expert parallelism the data-parallel ranks of an expert group run every MoE layer
        together, micro-batch by micro-batch: they must have as many micro-batches, and
        megatron's CPU token dispatcher (all-gather, model.token_dispatcher) as many tokens in
        each. The padding changes no token's result, nor the routers' load-balancing loss (it
        counts only tokens: forward_logits)."""
        group = self.layout.dp_cpu_group
        counts = torch.tensor([len(widths), -len(widths)])
        dist.all_reduce(counts, op=dist.ReduceOp.MAX, group=group)
        if counts[0] != -counts[1]:
            raise ValueError(
                f"the data-parallel ranks have from {-int(counts[1])} to {int(counts[0])} micro-batches; under "
                f"trainer.megatron.ep={self.layout.ep_size} they must have as many (equal shards of whole micro-batches)"
            )
        common = torch.tensor(widths)
        dist.all_reduce(common, op=dist.ReduceOp.MAX, group=group)
        return common.tolist()

    def _from_last_stage(self, value):
        """Only the last pipeline stage computes losses and log-probs; every stage returns its values."""
        if self.layout.pp_size == 1:
            return value
        box = [value]
        last = dist.get_global_rank(self.layout.pp_group, self.layout.pp_size - 1)
        dist.broadcast_object_list(box, src=last, group=self.layout.pp_group)
        return box[0]

    def _step_metrics(self, with_kl: bool, with_is: bool = False, with_stale: bool = False) -> StepMetrics:
        # Tensor-parallel peers hold the same values: the batch is spread over data-parallel ranks only.
        return StepMetrics(with_kl=with_kl, with_is=with_is, group=self.layout.dp_cpu_group, with_stale=with_stale)

    def _engine_routes(self, count: RoutingCount | None = None):
        """Per micro-batch, the context its forward runs in: its engine routes, for a policy with experts."""
        if self.routing is None:
            return lambda _micro: nullcontext()
        return lambda micro: self.routing.engine_routes(micro.routed_experts, self.algo.routing_replay, count)

    def _over_model_parallel(self, count: RoutingCount) -> RoutingCount:
        """Each pipeline stage routes its own layers, and under sequence parallelism each
        tensor-parallel rank its own slice of the sequence: the step's count is all of theirs."""
        groups = [self.layout.pp_group] if self.layout.pp_size > 1 else []
        if gpt_model(self.model).config.sequence_parallel:
            groups.append(self.layout.tp_group)
        if not groups:
            return count
        totals = torch.tensor([count.mismatched, count.compared], device=cpu_shims.device())
        for group in groups:
            dist.all_reduce(totals, group=group)
        mismatched, compared = totals.tolist()
        return RoutingCount(int(mismatched), int(compared))

    def _trainable(self, model):
        """trainer.moe.freeze_router: the routers take no gradient, so megatron's DDP gives them no
        grad buffer and its optimizer no state; they stay as loaded."""
        if self.trainer.moe.freeze_router:
            for name, param in model.named_parameters():
                if name.endswith(ROUTER_WEIGHT):
                    param.requires_grad_(False)
        return model

    def _load_model(self):
        model = build_model(self.spec, dtype=self.dtype)
        load_hf_weights(model, self.model_path, self.spec)
        return model
