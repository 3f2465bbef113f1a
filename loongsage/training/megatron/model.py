"""This rank's GPTModel from a MegatronModelSpec, and its forward to (vocabulary-sharded) logits."""

from __future__ import annotations

import contextlib
import functools

import torch
from torch import Tensor

from loongsage.training.megatron import cpu_shims
from loongsage.training.megatron.mapping import MegatronModelSpec, padded_vocab_size
from loongsage.training.megatron.norm import with_local_norms


def use_transformer_engine() -> bool:
    """TransformerEngine's layer spec where it can run, the local (plain torch) spec elsewhere.
    CUDA is asked first: importing TransformerEngine without a driver crashes."""
    if not cpu_shims.has_cuda():
        return False
    try:
        import transformer_engine  # noqa: F401
    except Exception:
        return False
    return True


def layer_spec(config):
    """What megatron builds the decoder of: its block spec, which gives each layer of this pipeline
    stage its dense or MoE layer spec (after `moe_layer_freq`; all dense without experts) and the
    block its final norm.

    On a GPU with TransformerEngine, its layers (and, for experts, its grouped GEMM: TEGroupedMLP,
    all local experts in one kernel); elsewhere megatron's local spec, plain torch: SequentialMLP
    runs the local experts one after another, and its norms are our LocalRMSNorm, which unlike
    megatron's WrappedTorchNorm runs under sequence parallelism (norm.py)."""
    from megatron.core.models.gpt import gpt_layer_specs

    te = use_transformer_engine()
    spec = gpt_layer_specs.get_gpt_decoder_block_spec(config, use_transformer_engine=te, normalization="RMSNorm")
    return spec if te else with_local_norms(spec)


def token_dispatcher() -> str:
    """megatron's MoE token dispatcher: how tokens reach the experts of other expert-parallel ranks.

    GPU (NCCL): `alltoall`, megatron's default for expert parallelism: each rank sends each token
    only to the ranks holding its experts, and the split sizes travel on a side CUDA stream.
    CPU (gloo): `allgather`: every rank of the expert-parallel group gathers all of the group's
    tokens, runs its local experts on those routed to them, and a reduce-scatter returns the sums.
    The `alltoall` dispatcher creates a `torch.cuda.Stream` when it is built and synchronizes on
    CUDA events, which a CPU has none of; `allgather` uses only all-gather and reduce-scatter,
    which gloo runs. Both compute the same outputs (each token's top-k experts, weighted by its
    probabilities); `allgather` moves ep times more activations, which matters on a GPU cluster,
    not on a CPU test.
    """
    return "alltoall" if cpu_shims.has_cuda() else "allgather"


def build_model(spec: MegatronModelSpec, *, dtype: torch.dtype = torch.float32):
    """The GPTModel of this rank's pipeline stage and tensor-parallel shard.

    Under tensor parallelism, sequence parallelism too: outside attention and the MLP each
    tensor-parallel rank holds 1/tp of the sequence (norms, residuals, routers), which divides
    those activations by tp and is how megatron-core trains experts under tensor parallelism at
    all (without it every tp rank would route the same tokens). A micro-batch's length must
    then be a multiple of tp (`sequence_multiple`).

    parallel_state must be initialized. The embedding and output layer have
    `padded_vocab_size(spec.vocab_size, tp)` rows; `forward_logits` masks the padding.
    Parameters are randomly initialized: load weights with convert.load_hf_weights.
    """
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel
    from megatron.core.transformer.transformer_config import TransformerConfig

    cpu_shims.install()
    tp = ps.get_tensor_model_parallel_world_size()
    pp = ps.get_pipeline_model_parallel_world_size()
    ep = ps.get_expert_model_parallel_world_size()
    _check_divisible(spec, tp, pp, ep)
    config = TransformerConfig(
        **spec.transformer,
        **(_expert_settings(ep) if spec.is_moe else {}),
        tensor_model_parallel_size=tp,
        sequence_parallel=tp > 1,
        pipeline_model_parallel_size=pp,
        params_dtype=dtype,
        pipeline_dtype=dtype,
        bf16=dtype == torch.bfloat16,
        fp16=dtype == torch.float16,
    )
    gpt_kwargs = dict(spec.gpt) | dict(vocab_size=padded_vocab_size(spec.vocab_size, tp))
    # Tied embeddings over pipeline stages: the constructor all-reduces the last stage's copy
    # of the embedding with a `.cuda()` on it (see cpu_shims 2.).
    with cpu_shims.cuda_literals_on_cpu():
        model = GPTModel(
            config=config,
            transformer_layer_spec=layer_spec(config),
            pre_process=ps.is_pipeline_first_stage(),
            post_process=ps.is_pipeline_last_stage(),
            **gpt_kwargs,
        )
    model.vocab_size_unpadded = spec.vocab_size  # forward_logits masks the columns past it
    # Created on the CPU (use_cpu_initialization); the CPU shim answers "cpu" here. The dtype
    # too: the local spec's norms (torch.nn.RMSNorm) ignore params_dtype and start in fp32, and
    # megatron-LM's Float16Module casts the whole model likewise.
    return model.to(device=torch.cuda.current_device(), dtype=dtype)


def _expert_settings(ep: int) -> dict:
    """TransformerConfig fields of a mixture of experts that depend on where it runs.

    Experts are split over `ep` expert-parallel ranks and never over tensor-parallel ranks
    (expert_tensor_parallel_size 1): each expert is small (moe_intermediate_size 768 in
    Qwen3-30B-A3B), so splitting it would cost a collective per expert for little memory, and
    whole experts keep the weight conversion a plain copy per expert."""
    return dict(
        expert_model_parallel_size=ep,
        expert_tensor_parallel_size=1,
        moe_token_dispatcher_type=token_dispatcher(),
        moe_grouped_gemm=use_transformer_engine(),
    )


def _check_divisible(spec: MegatronModelSpec, tp: int, pp: int, ep: int = 1) -> None:
    splits = [("num_attention_heads", spec.num_attention_heads), ("num_key_value_heads", spec.num_query_groups)]
    if len(spec.moe_layers) < spec.num_layers:  # some layer keeps a dense MLP
        splits.append(("intermediate_size", spec.ffn_hidden_size))
    if spec.shared_expert_size:
        splits.append(("shared_expert_intermediate_size", spec.shared_expert_size))
    for field, value in splits:
        if value % tp:
            raise ValueError(f"the model's {field}={value} does not split over trainer.megatron.tp={tp}")
    if spec.num_layers % pp:
        raise ValueError(f"the model's num_hidden_layers={spec.num_layers} does not split over trainer.megatron.pp={pp}")
    if ep > 1 and not spec.is_moe:
        raise ValueError(
            f"trainer.megatron.ep={ep}: the model ({spec.family}) has no experts to split; leave trainer.megatron.ep at 1"
        )
    if spec.is_moe and spec.num_experts % ep:
        raise ValueError(f"the model's num_experts={spec.num_experts} does not split over trainer.megatron.ep={ep}")


def gpt_model(model):
    """The GPTModel inside megatron's wrappers (DistributedDataParallel, Float16Module)."""
    from megatron.core.models.gpt import GPTModel

    while not isinstance(model, GPTModel):
        if not hasattr(model, "module"):
            raise TypeError(f"{type(model).__name__} is not a megatron GPTModel nor wraps one")
        model = model.module
    return model


def forward_logits(
    model, input_ids: Tensor, position_ids: Tensor, first_position: int = 0, attention_mask: Tensor | None = None
) -> Tensor:
    """Logits [B, T - first_position, V_local] of positions first_position.. on the last pipeline
    stage (this rank's vocabulary shard, padding columns at -inf); on an earlier stage, its output
    hidden states [T, B, H] (megatron's layout) for the next stage.

    `position_ids` must count 0..T-1 in every row (right padding): megatron's RoPE derives the
    positions from the sequence length and does not read position_ids. `attention_mask` [B, T]
    (1 = token, 0 = padding), for a mixture of experts: the routers' load-balancing loss counts
    only the tokens, so that it does not depend on how far a micro-batch was padded.
    """
    gpt = gpt_model(model)
    _check_positions(position_ids)
    _check_length(input_ids.shape[1], gpt.config)
    mask = causal_mask(input_ids.shape[1], str(input_ids.device))
    routing = {}
    if attention_mask is not None and gpt.config.num_moe_experts:
        routing = dict(padding_mask=attention_mask == 0)  # megatron's: True = padding
    with _output_layer_from(gpt, first_position):
        output = model(input_ids, position_ids, attention_mask=mask, **routing)
    if not gpt.post_process:
        return output
    return _mask_vocab_padding(output, gpt.vocab_size_unpadded)


@contextlib.contextmanager
def _output_layer_from(gpt, first_position: int):
    """Within: the output layer projects only positions first_position.. to the vocabulary (the
    largest activation of a long prompt); the decoder, its final norm included, still sees every
    token.

    Under sequence parallelism the decoder's output is this rank's slice of the sequence and the
    output layer gathers it; the slice is taken from the whole sequence, so we gather it here
    and tell the output layer not to, as megatron's own inference does for its last token. The
    gather's backward only splits: the output layer, then not sequence-parallel, sums the
    input's gradient over the vocabulary shards itself."""
    if not (gpt.post_process and first_position):
        yield
        return
    from megatron.core.tensor_parallel import gather_from_sequence_parallel_region

    sequence_parallel = gpt.output_layer.sequence_parallel

    def tail(_module, _args, hidden: Tensor) -> Tensor:
        if sequence_parallel:
            hidden = gather_from_sequence_parallel_region(hidden, tensor_parallel_output_grad=False)
        return hidden[first_position:]

    hook = gpt.decoder.register_forward_hook(tail)
    gpt.output_layer.sequence_parallel = False
    try:
        yield
    finally:
        hook.remove()
        gpt.output_layer.sequence_parallel = sequence_parallel


@functools.lru_cache(maxsize=8)
def causal_mask(length: int, device: str) -> Tensor:
    """[1, 1, T, T] bool, True = masked. Passed explicitly: megatron's default mask is made on "cuda"."""
    return torch.ones(length, length, dtype=torch.bool, device=device).triu(diagonal=1)[None, None]


def sequence_multiple(tp: int) -> int:
    """What a micro-batch's length must be a multiple of: tp under sequence parallelism (build_model)."""
    return tp


def _check_length(length: int, config) -> None:
    if config.sequence_parallel and length % config.tensor_model_parallel_size:
        raise ValueError(
            f"a micro-batch of {length} positions under sequence parallelism: its length must be a multiple of "
            f"trainer.megatron.tp={config.tensor_model_parallel_size} (pad it to model.sequence_multiple(tp))"
        )


def _check_positions(position_ids: Tensor) -> None:
    expected = torch.arange(position_ids.shape[-1], device=position_ids.device).expand_as(position_ids)
    if not torch.equal(position_ids, expected):
        raise ValueError("position_ids must be 0..T-1 in every row (right-padded batches): megatron's RoPE does not read them")


def _mask_vocab_padding(logits: Tensor, vocab_size: int) -> Tensor:
    from megatron.core import parallel_state as ps

    local = logits.shape[-1]
    start = ps.get_tensor_model_parallel_rank() * local
    if start + local <= vocab_size:
        return logits
    padding = torch.arange(start, start + local, device=logits.device) >= vocab_size
    return logits.masked_fill(padding, float("-inf"))
