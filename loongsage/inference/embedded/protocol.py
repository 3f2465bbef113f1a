"""SGLang `/generate` wire format: request validation and response building.

Validation is strict: an unknown or mistyped field is a 400 naming it, never silently ignored,
because a sampling parameter we drop would silently change the behaviour policy. Ranges are
those the scheduler's batched tensors can hold: a value that passes here cannot fail a decode
step, which would abort every other request in the batch with it.
"""

from __future__ import annotations

import base64
import dataclasses
import math
import uuid
from dataclasses import dataclass
from typing import Any

import torch

from loongsage.inference.embedded.request import Sequence
from loongsage.inference.embedded.sampling import SamplingParams

GENERATE_FIELDS = {
    "text",
    "input_ids",
    "sampling_params",
    "return_logprob",
    "logprob_start_len",
    "top_logprobs_num",
    "rid",
    "stream",
    "return_text_in_logprobs",
    "return_routed_experts",
}
SAMPLING_FIELDS = {f.name for f in dataclasses.fields(SamplingParams)}
TOP_K_MAX = 2**31 - 1  # SGLang's int32; ours is int64, but a client should not depend on that
SEED_RANGE = (-(2**63), 2**64 - 1)  # what torch.Generator.manual_seed takes


class BadRequest(ValueError):
    def __init__(self, message: str, field: str, status: int = 400):
        super().__init__(message)
        self.field = field
        self.status = status

    def to_json(self) -> dict:
        return {"error": {"message": str(self), "field": self.field}}


@dataclass(frozen=True)
class Limits:
    vocab_size: int
    max_context: int
    eos_token_ids: tuple[int, ...]
    # Why a request may not ask for return_routed_experts; None: it may.
    routed_experts_refused: str | None = "the model has no experts"


@dataclass
class GenerateRequest:
    sequences: list[Sequence]
    is_batch: bool
    return_text_in_logprobs: bool


def parse_generate(body: Any, limits: Limits, tokenizer) -> GenerateRequest:
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object", "body")
    unknown = sorted(set(body) - GENERATE_FIELDS)
    if unknown:
        raise BadRequest(f"unknown field {unknown[0]!r} (supported: {sorted(GENERATE_FIELDS)})", unknown[0])
    if body.get("stream", False) is not False:
        raise BadRequest("streaming is not supported by the embedded engine", "stream")
    prompts, is_batch = _prompts(body, limits, tokenizer)
    n = len(prompts)
    params = _per_prompt(body.get("sampling_params"), "sampling_params", n, is_batch, dict, {})
    rids = _per_prompt(body.get("rid"), "rid", n, is_batch, str, None)
    return_logprob = _typed(body.get("return_logprob", False), bool, "return_logprob")
    starts = _per_prompt(body.get("logprob_start_len"), "logprob_start_len", n, is_batch, int, -1)
    tops = _per_prompt(body.get("top_logprobs_num"), "top_logprobs_num", n, is_batch, int, 0)
    routed_experts = _typed(body.get("return_routed_experts", False), bool, "return_routed_experts")
    if routed_experts and limits.routed_experts_refused:
        raise BadRequest(f"return_routed_experts: {limits.routed_experts_refused}", "return_routed_experts")
    sequences = []
    for i, (prompt, raw_params, rid, start, top) in enumerate(zip(prompts, params, rids, starts, tops)):
        field = f"sampling_params[{i}]" if is_batch else "sampling_params"
        if not 0 <= top <= limits.vocab_size:
            raise BadRequest(f"top_logprobs_num={top} must be in [0, {limits.vocab_size}] (the vocabulary)", "top_logprobs_num")
        sp = parse_sampling_params(raw_params, limits, field)
        if len(prompt) + sp.max_new_tokens > limits.max_context:
            raise BadRequest(
                f"prompt of {len(prompt)} tokens + max_new_tokens={sp.max_new_tokens} exceeds the context "
                f"limit of {limits.max_context}",
                f"{field}.max_new_tokens",
            )
        if not -1 <= start < len(prompt):
            raise BadRequest(f"logprob_start_len={start} must be -1 or in [0, {len(prompt)})", "logprob_start_len")
        stop_ids = set(sp.stop_token_ids) | (set() if sp.ignore_eos else set(limits.eos_token_ids))
        sequences.append(
            Sequence(
                rid=rid or uuid.uuid4().hex,
                prompt_ids=prompt,
                params=sp,
                stop_ids=frozenset(stop_ids),
                return_logprob=return_logprob,
                logprob_start_len=start,
                top_logprobs_num=top,
                return_routed_experts=routed_experts,
            )
        )
    text_in_lp = _typed(body.get("return_text_in_logprobs", False), bool, "return_text_in_logprobs")
    return GenerateRequest(sequences, is_batch, text_in_lp)


def _prompts(body: dict, limits: Limits, tokenizer) -> tuple[list[list[int]], bool]:
    has_text, has_ids = body.get("text") is not None, body.get("input_ids") is not None
    if has_text == has_ids:
        raise BadRequest("exactly one of 'text' and 'input_ids' is required", "input_ids")
    if has_text:
        text = body["text"]
        is_batch = isinstance(text, list)
        texts = text if is_batch else [text]
        if not texts or not all(isinstance(t, str) for t in texts):
            raise BadRequest("'text' must be a string or a non-empty list of strings", "text")
        if tokenizer is None:
            raise BadRequest("this model directory has no tokenizer; send 'input_ids'", "text")
        return [tokenizer.encode(t) for t in texts], is_batch
    ids = body["input_ids"]
    is_batch = isinstance(ids, list) and bool(ids) and isinstance(ids[0], list)
    prompts = ids if is_batch else [ids]
    for i, prompt in enumerate(prompts):
        field = f"input_ids[{i}]" if is_batch else "input_ids"
        _check_token_ids(prompt, limits.vocab_size, field)
        if not prompt:
            raise BadRequest("prompt is empty", field)
    return prompts, is_batch


def _check_token_ids(ids: Any, vocab_size: int, field: str) -> None:
    if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
        raise BadRequest("must be a list of integer token ids", field)
    bad = next((t for t in ids if not 0 <= t < vocab_size), None)
    if bad is not None:
        raise BadRequest(f"token id {bad} is outside the vocabulary [0, {vocab_size})", field)


def _per_prompt(value: Any, field: str, n: int, is_batch: bool, kind: type, default: Any) -> list:
    """A per-prompt field is either one value shared by all prompts or, in a batch, a list of n."""
    if value is None:
        return [default] * n
    if isinstance(value, list):
        if not is_batch or len(value) != n:
            raise BadRequest(f"a list '{field}' needs one entry per prompt ({n})", field)
        for i, v in enumerate(value):
            _typed(v, kind, f"{field}[{i}]")
        return value
    _typed(value, kind, field)
    if kind is str and is_batch:
        raise BadRequest(f"a batch needs a list '{field}' with one entry per prompt", field)
    return [value] * n


def _typed(value: Any, kind: type | tuple, field: str):
    kinds = kind if isinstance(kind, tuple) else (kind,)
    # bool is an int in Python; JSON true must not pass as a count.
    if isinstance(value, bool) and bool not in kinds:
        raise BadRequest(f"expected {_names(kinds)}, got a boolean", field)
    if not isinstance(value, kinds):
        raise BadRequest(f"expected {_names(kinds)}, got {type(value).__name__}", field)
    return value


def _names(kinds: tuple) -> str:
    return " or ".join(k.__name__ for k in kinds)


def parse_sampling_params(raw: dict, limits: Limits, field: str) -> SamplingParams:
    unknown = sorted(set(raw) - SAMPLING_FIELDS)
    if unknown:
        raise BadRequest(
            f"unknown sampling parameter {unknown[0]!r} (supported: {sorted(SAMPLING_FIELDS)})", f"{field}.{unknown[0]}"
        )
    raw = {k: v for k, v in raw.items() if v is not None}

    def get(name: str, kind: type | tuple, ok, rule: str):
        if name not in raw:
            return getattr(SamplingParams, name)
        value = _typed(raw[name], kind, f"{field}.{name}")
        if not ok(value):
            shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:40]}..."
            raise BadRequest(f"{name}={shown}: {rule}", f"{field}.{name}")
        return value

    stop = raw.get("stop", ())
    stop = [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, (list, tuple)) or not all(isinstance(s, str) and s for s in stop):
        raise BadRequest("stop must be a non-empty string or a list of them", f"{field}.stop")
    stop_ids = raw.get("stop_token_ids", [])
    _check_token_ids(stop_ids, limits.vocab_size, f"{field}.stop_token_ids")
    return SamplingParams(
        temperature=float(get("temperature", (int, float), lambda v: _finite(v) and v >= 0, "must be finite and >= 0")),
        top_p=float(get("top_p", (int, float), lambda v: 0 < v <= 1, "must be in (0, 1]")),
        top_k=get("top_k", int, lambda v: v == -1 or 1 <= v <= TOP_K_MAX, f"must be -1 (off) or in [1, {TOP_K_MAX}]"),
        max_new_tokens=get(
            "max_new_tokens",
            int,
            lambda v: 0 <= v <= limits.max_context,
            f"must be in [0, {limits.max_context}] (the context limit)",
        ),
        stop=tuple(stop),
        stop_token_ids=tuple(stop_ids),
        ignore_eos=get("ignore_eos", bool, lambda v: True, ""),
        skip_special_tokens=get("skip_special_tokens", bool, lambda v: True, ""),
        no_stop_trim=get("no_stop_trim", bool, lambda v: True, ""),
        sampling_seed=get(
            "sampling_seed", int, lambda v: SEED_RANGE[0] <= v <= SEED_RANGE[1], f"must be in [{SEED_RANGE[0]}, {SEED_RANGE[1]}]"
        ),
    )


def _finite(value: int | float) -> bool:
    """Also False for an int too large to become a float (float(10**400) raises)."""
    return math.isfinite(value) if isinstance(value, float) else abs(value) < 2**1000


def build_response(seq: Sequence, weight_version: str, tokenizer, text_in_logprobs: bool) -> dict:
    meta = {
        "id": seq.rid,
        "finish_reason": seq.finish_reason,
        "prompt_tokens": len(seq.prompt_ids),
        "completion_tokens": len(seq.output_ids),
        "cached_tokens": seq.cached_tokens,
        "weight_version": weight_version,
    }
    if seq.return_logprob:

        def piece(token: int):
            return tokenizer.decode([token]) if text_in_logprobs and tokenizer is not None else None

        def top(entry):
            return None if entry is None else [[lp, t, piece(t)] for t, lp in zip(*entry)]

        meta["output_token_logprobs"] = [[lp, t, piece(t)] for lp, t in zip(seq.output_logprobs, seq.output_ids)]
        if seq.input_logprobs is not None:
            tokens = seq.prompt_ids[seq.logprob_start_len :]
            meta["input_token_logprobs"] = [[lp, t, piece(t)] for lp, t in zip(seq.input_logprobs, tokens)]
        if seq.top_logprobs_num:
            meta["output_top_logprobs"] = [top(entry) for entry in seq.output_top_logprobs]
            if seq.input_top_logprobs is not None:
                meta["input_top_logprobs"] = [top(entry) for entry in seq.input_top_logprobs]
    if seq.return_routed_experts:
        meta["routed_experts"] = encode_routed_experts(seq)
    return {"text": _response_text(seq, tokenizer), "output_ids": list(seq.output_ids), "meta_info": meta}


def encode_routed_experts(seq: Sequence) -> str:
    """SGLang's encoding: base64 of int32 [seqlen - 1, layers, top_k], every token of prompt and
    output but the last (whose forward never ran), row i the experts position i was routed to."""
    rows = torch.cat(seq.routed_experts)[: len(seq.prompt_ids) + len(seq.output_ids) - 1]
    return base64.b64encode(rows.contiguous().numpy().tobytes()).decode("ascii")


def _response_text(seq: Sequence, tokenizer) -> str:
    if tokenizer is None:
        return ""
    ids, reason, params = seq.output_ids, seq.finish_reason or {}, seq.params
    matched = reason.get("matched")
    trim = reason.get("type") == "stop" and not params.no_stop_trim
    if trim and isinstance(matched, int):
        ids = ids[:-1]
    text = tokenizer.decode(ids, skip_special_tokens=params.skip_special_tokens)
    if trim and isinstance(matched, str):
        text = text[: text.find(matched)] if matched in text else text
    return text
