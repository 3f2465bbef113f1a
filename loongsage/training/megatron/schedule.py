"""Micro-batches through megatron's forward-backward schedule, each scored by the caller.

megatron's `get_forward_backward_func` owns the order of forwards and backwards (and the
hand-offs between pipeline stages); we hand it our packed micro-batches and, per micro-batch,
a function from its token scores to the loss to backpropagate.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from torch import Tensor

from loongsage.training.batch import PackedBatch
from loongsage.training.megatron import cpu_shims
from loongsage.training.megatron.model import forward_logits
from loongsage.training.megatron.parallel import Layout
from loongsage.training.token_scores import TokenScores, VocabShardScores

# (index of the micro-batch, the micro-batch, its token scores) -> the loss to backpropagate
ScoreFn = Callable[[int, PackedBatch, TokenScores], Tensor]
# the last stage's output [B, C + 1, V_local] -> what ScoreFn gets of it (default: TokenScores)
ReadOutput = Callable[[Tensor, Layout], object]


def token_scores(output: Tensor, layout: Layout) -> TokenScores:
    """A policy's output: this rank's vocabulary shard of every column's logits."""
    return VocabShardScores(output[:, :-1], layout.tp_rank * output.shape[-1], layout.tp_group)


# the micro-batch about to be forwarded -> the context its forward runs in (R3: its engine routes)
ForwardContext = Callable[[PackedBatch], AbstractContextManager]


def run_micro_batches(
    model,
    micros: list[PackedBatch],
    layout: Layout,
    on_scores: ScoreFn,
    forward_only: bool,
    around_forward: ForwardContext = lambda _micro: nullcontext(),
    read_output: ReadOutput = token_scores,
) -> None:
    """Forward every micro-batch (and backward unless `forward_only`), calling `on_scores` on the
    last pipeline stage. Gradients accumulate in the DDP buffers and are reduced over the
    data-parallel group after the last micro-batch. Each forward runs inside `around_forward(micro)`
    (the schedule may interleave one micro-batch's forward with another's backward). `read_output`
    turns the last stage's output into what `on_scores` takes (a critic's: its values)."""
    from megatron.core.pipeline_parallel import get_forward_backward_func

    batches = iter(enumerate(micros))

    def forward_step(data_iterator, chunk):
        index, micro = next(data_iterator)
        with around_forward(micro):
            logits = forward_logits(
                chunk,
                micro.input_ids,
                micro.position_ids,
                first_position=micro.first_column,
                attention_mask=micro.attention_mask,
            )

        def loss_func(output: Tensor):
            loss = on_scores(index, micro, read_output(output, layout))
            # The schedule divides each micro-batch's loss by their number, for a mean; our
            # losses are already weighted by their share of the global batch, so undo it.
            return loss * len(micros), {}

        return logits, loss_func

    width = max(micro.input_ids.shape[1] for micro in micros)
    with cpu_shims.cuda_literals_on_cpu():
        get_forward_backward_func()(
            forward_step_func=forward_step,
            data_iterator=batches,
            model=[model],
            num_microbatches=len(micros),
            seq_length=width,
            micro_batch_size=micros[0].input_ids.shape[0],
            forward_only=forward_only,
        )
