"""A compact Llama-family decoder for inference on CPU: Llama, Qwen2, Qwen3 and their
mixture-of-experts kin Qwen2-MoE and Qwen3-MoE (experts.py).

Parameter names mirror Hugging Face's (`model.layers.N.self_attn.q_proj.weight`, ...) so that
safetensors checkpoints and trainer weight updates apply by name without a mapping table.
The model never owns a KV cache: `prefill` returns the keys/values it computed and `decode`
reads/writes a cache passed in by the scheduler.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from loongsage.inference.embedded.experts import GatedMLP, MoeShape, SparseMoe
from loongsage.inference.embedded.layers import Embedding, Linear, RMSNorm, linear

SUPPORTED_ARCHITECTURES = (
    "LlamaForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
    "Qwen2MoeForCausalLM",
    "Qwen3MoeForCausalLM",
)
# Qwen2 and Qwen2-MoE always carry q/k/v biases (older configs have no key saying so); Qwen3's
# attention normalizes each head of q and k before RoPE.
QKV_BIAS_ARCHITECTURES = ("Qwen2ForCausalLM", "Qwen2MoeForCausalLM")
QK_NORM_ARCHITECTURES = ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM")


class UnsupportedModelError(ValueError):
    pass


@dataclass(frozen=True)
class ModelConfig:
    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope: dict
    max_position_embeddings: int
    tie_word_embeddings: bool
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    qk_norm: bool
    moe: MoeShape | None  # None: every layer has a dense MLP
    eos_token_ids: tuple[int, ...]

    @classmethod
    def from_dir(cls, model_dir: str | Path) -> ModelConfig:
        model_dir = Path(model_dir)
        raw = json.loads((model_dir / "config.json").read_text())
        architectures = raw.get("architectures") or []
        arch = next((a for a in architectures if a in SUPPORTED_ARCHITECTURES), None)
        if arch is None:
            raise UnsupportedModelError(
                f"{model_dir}/config.json: architectures={architectures} is not supported by the "
                f"embedded engine (supported: {', '.join(SUPPORTED_ARCHITECTURES)})"
            )
        heads = raw["num_attention_heads"]
        # Llama's and Qwen3's `attention_bias` covers o_proj too.
        attention_bias = bool(raw.get("attention_bias", False))
        return cls(
            architecture=arch,
            vocab_size=raw["vocab_size"],
            hidden_size=raw["hidden_size"],
            intermediate_size=raw["intermediate_size"],
            num_layers=raw["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=raw.get("num_key_value_heads") or heads,
            head_dim=raw.get("head_dim") or raw["hidden_size"] // heads,
            rms_norm_eps=raw.get("rms_norm_eps", 1e-6),
            rope=_rope_parameters(raw),
            max_position_embeddings=raw.get("max_position_embeddings", 2048),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            qkv_bias=arch in QKV_BIAS_ARCHITECTURES or attention_bias,
            o_bias=attention_bias,
            mlp_bias=bool(raw.get("mlp_bias", False)),
            qk_norm=arch in QK_NORM_ARCHITECTURES,
            moe=MoeShape.from_config(raw, raw["num_hidden_layers"]),
            eos_token_ids=_eos_token_ids(model_dir, raw),
        )


def _rope_parameters(raw: dict) -> dict:
    """transformers>=5 writes `rope_parameters`; older configs have `rope_theta` + `rope_scaling`
    (which may be null)."""
    params = raw.get("rope_parameters")
    if params is None:
        params = dict(raw.get("rope_scaling") or {})
        params["rope_theta"] = raw.get("rope_theta", 10000.0)
    params = dict(params)
    params["rope_type"] = params.get("rope_type") or params.get("type") or "default"
    return params


def _eos_token_ids(model_dir: Path, raw: dict) -> tuple[int, ...]:
    """generation_config.json wins over config.json: chat models list their end-of-turn token there."""
    eos = raw.get("eos_token_id")
    gen_path = model_dir / "generation_config.json"
    if gen_path.exists():
        eos = json.loads(gen_path.read_text()).get("eos_token_id", eos)
    if eos is None:
        return ()
    return tuple(eos) if isinstance(eos, list) else (eos,)


def rope_inv_freq(cfg: ModelConfig) -> torch.Tensor:
    rope = cfg.rope
    dim = cfg.head_dim
    inv_freq = 1.0 / (rope["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    kind = rope["rope_type"]
    if kind == "default":
        return inv_freq.float()
    if kind == "linear":
        return (inv_freq / rope["factor"]).float()
    if kind == "llama3":
        return _llama3_inv_freq(inv_freq, rope).float()
    raise UnsupportedModelError(f"rope_type={kind!r} is not supported (default | linear | llama3)")


def _llama3_inv_freq(inv_freq: torch.Tensor, rope: dict) -> torch.Tensor:
    factor = rope["factor"]
    low, high = rope["low_freq_factor"], rope["high_freq_factor"]
    old_len = rope["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return torch.where(medium, smoothed, scaled)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """x: [..., D] (half-rotation layout, as HF Llama); cos/signed_sin broadcast against it.

    `signed_sin` carries rotate_half's minus sign (-sin on the first half), which saves a negation
    per call and is bit-identical: (-a) * b == a * (-b) in IEEE arithmetic.
    """
    half = x.shape[-1] // 2
    return x * cos + torch.cat((x[..., half:], x[..., :half]), dim=-1) * signed_sin


def fuse_linears(*linears: nn.Linear) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One matmul instead of several: q/k/v are skinny on GQA models and each call has overhead.
    Each original parameter becomes a view into the fused tensor, so loading or updating weights
    by their HF names writes straight into it."""
    weight = torch.cat([lin.weight.detach() for lin in linears])
    bias = torch.cat([lin.bias.detach() for lin in linears]) if linears[0].bias is not None else None
    start = 0
    for lin in linears:
        rows = lin.weight.shape[0]
        lin.weight = nn.Parameter(weight[start : start + rows], requires_grad=False)
        if bias is not None:
            lin.bias = nn.Parameter(bias[start : start + rows], requires_grad=False)
        start += rows
    return weight, bias


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_proj = Linear(cfg.hidden_size, cfg.num_heads * cfg.head_dim, bias=cfg.qkv_bias)
        self.k_proj = Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=cfg.qkv_bias)
        self.v_proj = Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=cfg.qkv_bias)
        self.o_proj = Linear(cfg.num_heads * cfg.head_dim, cfg.hidden_size, bias=cfg.o_bias)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)

    def qkv(self, x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor):
        """x: [B, T, hidden] -> q [B, T, H, D], k/v [B, T, KVH, D] with RoPE applied; cos/sin [B, T, 1, D]."""
        b, t, _ = x.shape
        heads = self.num_heads + 2 * self.num_kv_heads
        qkv = linear(x, self.fused_weight, self.fused_bias).view(b, t, heads, self.head_dim)
        qk = qkv[:, :, : self.num_heads + self.num_kv_heads]
        if hasattr(self, "q_norm"):
            qk = torch.cat((self.q_norm(qk[:, :, : self.num_heads]), self.k_norm(qk[:, :, self.num_heads :])), dim=2)
        # q and k share one RoPE pass: half the elementwise calls of rotating them apart.
        qk = apply_rope(qk, cos, signed_sin)
        return qk[:, :, : self.num_heads], qk[:, :, self.num_heads :], qkv[:, :, self.num_heads + self.num_kv_heads :]

    def fuse(self) -> None:
        self.fused_weight, self.fused_bias = fuse_linears(self.q_proj, self.k_proj, self.v_proj)

    def out(self, attn: torch.Tensor) -> torch.Tensor:
        """attn: [B, T, H, D] -> [B, T, hidden]."""
        b, t = attn.shape[:2]
        return linear(attn.reshape(b, t, -1), self.o_proj.weight, self.o_proj.bias)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, index: int):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.sparse = cfg.moe is not None and index in cfg.moe.sparse_layers
        self.top_k = cfg.moe.top_k if cfg.moe else 0
        if self.sparse:
            self.mlp = SparseMoe(cfg.moe, cfg.hidden_size)
        else:
            self.mlp = GatedMLP(cfg.hidden_size, cfg.intermediate_size, bias=cfg.mlp_bias)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def feed_forward(self, x: torch.Tensor, routed: list[torch.Tensor] | None) -> torch.Tensor:
        """x plus the MLP's (or the experts') output. `routed`, when given, gets this layer's chosen
        experts [..., top_k] appended: -1 on a dense layer of an MoE model."""
        h = self.post_attention_layernorm(x)
        if not self.sparse:
            if routed is not None:
                routed.append(torch.full((*h.shape[:-1], self.top_k), -1))
            return x + self.mlp(h)
        out, experts = self.mlp(h)
        if routed is not None:
            routed.append(experts)
        return x + out


class Backbone(nn.Module):
    """Holds the `model.*` parameters under HF's names."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, index) for index in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class LlamaModel(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.model = Backbone(cfg)
        self.lm_head = Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.register_buffer("inv_freq", rope_inv_freq(cfg), persistent=False)
        self._rope_cos: torch.Tensor | None = None
        self._rope_sin: torch.Tensor | None = None

    def fuse_projections(self) -> None:
        """Call once after the weights are in place (the forward passes use the fused tensors)."""
        for layer in self.model.layers:
            layer.self_attn.fuse()

    def _cos_sin(self, positions: torch.Tensor, dtype: torch.dtype):
        """positions: [B, T] -> cos/signed_sin [B, T, 1, D], gathered from tables built once.

        The tables hold the very values HF computes per call (fp32 position * inv_freq, then
        cos/sin), so gathering rows changes nothing numerically.
        """
        needed = int(positions.max()) + 1
        if self._rope_cos is None or self._rope_cos.shape[0] < needed or self._rope_cos.dtype != dtype:
            # Doubling keeps rebuilds rare while decode walks one position per step.
            self._build_rope_tables(max(2 * needed, 1024), dtype)
        return self._rope_cos[positions][:, :, None], self._rope_sin[positions][:, :, None]

    def _build_rope_tables(self, length: int, dtype: torch.dtype) -> None:
        freqs = torch.arange(length).float()[:, None] * self.inv_freq
        self._rope_cos = torch.cat((freqs, freqs), dim=-1).cos().to(dtype)
        self._rope_sin = torch.cat((-freqs.sin(), freqs.sin()), dim=-1).to(dtype)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final-normed hidden states -> fp32 logits."""
        return linear(hidden, self.lm_head.weight).float()

    @torch.inference_mode()
    def prefill(self, input_ids: torch.Tensor):
        """Causal forward over one prompt. input_ids: [T].

        Returns (hidden [T, hidden] after the final norm, keys, values) with keys/values
        stacked over layers as [layers, kv_heads, T, head_dim], ready to copy into a cache slot.
        """
        hidden, keys, values = self.prefill_batch([input_ids])
        return hidden[0], keys[:, 0], values[:, 0]

    @torch.inference_mode()
    def prefill_batch(
        self,
        prompts: list[torch.Tensor],
        past: tuple[torch.Tensor, torch.Tensor] | None = None,
        routed: list[torch.Tensor] | None = None,
    ):
        """Causal forward over several prompts at once, right-padded to the longest.

        `past` is the keys/values ([layers, kv_heads, P, head_dim]) of a prefix every prompt
        continues: the prompts then hold only the tokens after it, at positions P onwards, and
        attend to the prefix as well as causally to themselves.
        Causal attention keeps every real token blind to the padding after it, so no padding mask
        is needed; outputs at padded positions are garbage the caller slices off.
        Returns (hidden [N, T, hidden] after the final norm, keys, values [layers, N, kv_heads, T, head_dim])
        for the prompts' own tokens. `routed`, when given, receives each layer's chosen experts
        [N, T, top_k] (an MoE model's; see DecoderLayer.feed_forward).
        """
        n, t = len(prompts), max(p.shape[0] for p in prompts)
        start = 0 if past is None else past[0].shape[2]
        input_ids = torch.zeros(n, t, dtype=torch.long)
        for row, prompt in zip(input_ids, prompts):
            row[: prompt.shape[0]] = prompt
        x = self.model.embed_tokens(input_ids)
        cos, sin = self._cos_sin(torch.arange(start, start + t)[None], x.dtype)
        # With a prefix, query i sees all `start` prefix columns and its own first i + 1 columns.
        mask = None if past is None else torch.ones(t, start + t, dtype=torch.bool).tril(start)
        keys, values = [], []
        for i, layer in enumerate(self.model.layers):
            attn = layer.self_attn
            q, k, v = attn.qkv(layer.input_layernorm(x), cos, sin)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            if past is None:
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            else:
                seen_k = torch.cat((past[0][i].expand(n, -1, -1, -1), k), dim=2)
                seen_v = torch.cat((past[1][i].expand(n, -1, -1, -1), v), dim=2)
                out = F.scaled_dot_product_attention(q, seen_k, seen_v, attn_mask=mask, enable_gqa=True)
            x = x + attn.out(out.transpose(1, 2))
            x = layer.feed_forward(x, routed)
            keys.append(k)
            values.append(v)
        return self.model.norm(x), torch.stack(keys), torch.stack(values)

    @torch.inference_mode()
    def decode(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        routed: list[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """One token for each of B running sequences held in cache slots 0..B-1.

        input_ids, positions: [B]; caches: [layers, slots, kv_heads, capacity, head_dim].
        Writes this step's keys/values at `positions` and returns normed hidden [B, hidden].
        `routed`: as for prefill_batch, [B, 1, top_k] per layer.
        """
        b = input_ids.shape[0]
        span = int(positions.max()) + 1
        # Shorter sequences see padding columns beyond their own length; mask them out.
        bias = torch.zeros(b, 1, 1, span).masked_fill_(
            (torch.arange(span)[None, :] > positions[:, None])[:, None, None, :], float("-inf")
        )
        slots = _cache_rows(k_cache, b, positions)
        x = self.model.embed_tokens(input_ids)[:, None]
        cos, sin = self._cos_sin(positions[:, None], x.dtype)
        for i, layer in enumerate(self.model.layers):
            attn = layer.self_attn
            q, k, v = attn.qkv(layer.input_layernorm(x), cos, sin)
            flat_k, flat_v = k_cache[i].view(-1, k_cache.shape[-1]), v_cache[i].view(-1, v_cache.shape[-1])
            flat_k.index_copy_(0, slots, k.reshape(-1, k.shape[-1]))
            flat_v.index_copy_(0, slots, v.reshape(-1, v.shape[-1]))
            out = _decode_attention(q[:, 0], k_cache[i, :b, :, :span], v_cache[i, :b, :, :span], bias)
            x = x + attn.out(out[:, None])
            x = layer.feed_forward(x, routed)
        return self.model.norm(x[:, 0])


def _cache_rows(cache: torch.Tensor, batch: int, positions: torch.Tensor) -> torch.Tensor:
    """Row indices, in one layer's cache viewed as [slots * kv_heads * capacity, head_dim], of
    position `positions[s]` for slots s < batch and every kv head ([batch * kv_heads], slot-major)."""
    _, _, kv_heads, capacity, _ = cache.shape
    heads = torch.arange(kv_heads)[None, :]
    return ((torch.arange(batch)[:, None] * kv_heads + heads) * capacity + positions[:, None]).reshape(-1)


def _decode_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """One query per sequence: q [B, H, D], keys/values [B, KVH, S, D], additive bias [B, 1, 1, S]
    -> [B, H, D]. Plain batched matmuls: SDPA's flash kernel is tuned for long query blocks and
    measured several times slower for a single query row."""
    b, h, d = q.shape
    kv_heads = keys.shape[1]
    # GQA: query heads sharing a kv head are consecutive, so they become that head's rows.
    grouped = q.reshape(b, kv_heads, h // kv_heads, d)
    scores = torch.matmul(grouped, keys.transpose(-1, -2)).mul_(1.0 / math.sqrt(d)).add_(bias)
    return torch.matmul(scores.softmax(-1), values).reshape(b, h, d)
