"""This machine's bound for a generation workload: the model's weight matmuls alone, timed here.

A token's forward multiplies by every weight once: per layer the fused q/k/v projection, the
output projection, and the gate, up and down projections; then the LM head. The bound times
exactly those matmuls, at the workload's own shapes, in the engine's orientation
(`layers.linear`), each layer with weights of its own as the model's are (so a decode step
streams them all from memory, as the engine's does), and takes nothing else: an engine at 100%
would spend no time on attention over the KV cache, norms, RoPE, sampling or Python.

Prefill is one pass over the prompts' distinct tokens as rows (their common prefix counted once,
as the engine's prefix cache computes it). Decode is one pass per step at that
step's rows, at the fastest width the engine could pad them to (`scheduler.decode_width`
pads for the same reason: MKL's skinny kernels are faster at some widths than at fewer rows).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from loongsage.inference.embedded.llama import ModelConfig


def weight_matmuls(cfg: ModelConfig) -> list[tuple[int, int]]:
    """(out, in) of each weight matmul of one forward, in order: per layer q/k/v fused, o, gate,
    up, down; then the LM head."""
    if cfg.moe is not None:
        raise ValueError(f"the GEMM bound is written for dense models; {cfg.architecture} routes tokens to experts")
    qkv = (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim
    layer = [
        (qkv, cfg.hidden_size),
        (cfg.hidden_size, cfg.num_heads * cfg.head_dim),
        (cfg.intermediate_size, cfg.hidden_size),
        (cfg.intermediate_size, cfg.hidden_size),
        (cfg.hidden_size, cfg.intermediate_size),
    ]
    return layer * cfg.num_layers + [(cfg.vocab_size, cfg.hidden_size)]


@dataclass(frozen=True)
class PhaseBound:
    """The bound's seconds for one phase of a workload and the rate they imply."""

    rows: int  # tokens through the forward (prefill: prompt tokens; decode: generated tokens)
    seconds: float
    flops: float

    @property
    def gflops(self) -> float:
        return self.flops / self.seconds / 1e9


class GemmBound:
    """The model's weight matmuls with random weights of its shapes, timed on this machine."""

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype = torch.float32, repeats: int = 5):
        self.shapes = weight_matmuls(cfg)
        generator = torch.Generator().manual_seed(0)
        self.weights = [torch.randn(out, inp, generator=generator, dtype=dtype) for out, inp in self.shapes]
        self.dtype, self.repeats = dtype, repeats
        self._seconds: dict[int, float] = {}

    def flops(self, rows: int) -> float:
        return 2.0 * rows * sum(out * inp for out, inp in self.shapes)

    def forward_seconds(self, rows: int) -> float:
        """The fastest of `repeats` passes (after one untimed) of every weight matmul at `rows` rows."""
        if rows not in self._seconds:
            inputs = {inp: torch.randn(inp, rows, dtype=self.dtype) for _, inp in self.shapes}
            passes = []
            for index in range(self.repeats + 1):
                start = time.perf_counter()
                for weight in self.weights:
                    torch.mm(weight, inputs[weight.shape[1]])
                if index:
                    passes.append(time.perf_counter() - start)
            self._seconds[rows] = min(passes)  # a bound: the best this machine did
        return self._seconds[rows]

    def prefill(self, prompt_tokens: int) -> PhaseBound:
        return PhaseBound(prompt_tokens, self.forward_seconds(prompt_tokens), self.flops(prompt_tokens))

    def decode(self, steps_by_rows: Mapping[int, int], widths: list[int]) -> PhaseBound:
        """`steps_by_rows`: how many decode steps ran that many sequences. Each step is timed at
        the fastest of `widths` that holds its rows."""
        seconds = sum(count * self._fastest_width(rows, widths) for rows, count in steps_by_rows.items())
        tokens = sum(rows * count for rows, count in steps_by_rows.items())
        return PhaseBound(tokens, seconds, self.flops(tokens))

    def _fastest_width(self, rows: int, widths: list[int]) -> float:
        return min(self.forward_seconds(width) for width in [rows, *widths] if width >= rows)


def decode_steps_by_rows(lengths: list[int]) -> dict[int, int]:
    """The decode steps of requests admitted together, each asking for exactly `lengths[i]`
    tokens: the first token of each comes with its prefill, and step k runs every request
    still short of its length."""
    steps: dict[int, int] = {}
    for step in range(1, max(lengths)):
        rows = sum(1 for length in lengths if length > step)
        steps[rows] = steps.get(rows, 0) + 1
    return steps


def distinct_prompt_tokens(prompts: list[list[int]]) -> int:
    """The prompt tokens a prefill must compute at least: the prompts' common prefix once (the
    engine's prefix cache computes it once), and each prompt's rest."""
    common = 0
    while common < min(len(p) for p in prompts) and len({p[common] for p in prompts}) == 1:
        common += 1
    return common + sum(len(p) - common for p in prompts)
