"""`python -m loongsage.bench engine` on the tiny model: both sides produce the workload's tokens,
and the engine's seconds in prefill and in decode are set against this machine's GEMM bound for
the same shapes, apart; a mixture-of-experts model gets the ratio and says why it has no bound."""

from __future__ import annotations

import re
import subprocess
import sys

ARGS = ["--prompts", "4", "--max-new-tokens", "16", "--repeats", "1", "--threads", "1"]


def bench(model: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "loongsage.bench", "engine", "--model", model, *ARGS], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


def test_the_engine_is_set_against_the_bound_of_its_prefill_and_its_decode_apart():
    out = bench("tiny")
    tokens = int(re.search(r"output tokens=(\d+)", out).group(1))
    assert re.search(rf"^embedded engine : +{tokens} tokens", out, re.M) and "ratio (engine / transformers tokens/s)" in out, out
    prefill = re.search(
        r"^  prefill: (\d+) prompt tokens \(of \d+, their common prefix once\), bound ([\d.]+) s .* = (\d+)% of the bound$",
        out,
        re.M,
    )
    decode_line = r"^  decode: +(\d+) tokens in (\d+) steps of 1-4 rows, bound ([\d.]+) s .* = (\d+)% of the bound$"
    decode = re.search(decode_line, out, re.M)
    assert prefill and decode, out
    # The first token of each of the 4 requests comes with its prefill; the rest are decoded.
    assert int(decode.group(1)) == tokens - 4, out
    assert 0 < int(prefill.group(3)) and 0 < int(decode.group(4)), out
    assert re.search(r"^  all: +bound [\d.]+ tokens/s; engine [\d.]+ tokens/s = \d+% of it", out, re.M), out


def test_a_mixture_of_experts_model_gets_its_ratio_and_no_bound():
    out = bench("tiny-moe")
    assert "ratio (engine / transformers tokens/s)" in out and "bound: not measured for Qwen3MoeForCausalLM" in out, out
