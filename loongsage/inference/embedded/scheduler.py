"""Continuous batching loop.

A background thread admits queued requests into free KV-cache slots (prefilling the distinct
new prompts together in right-padded batches, or copying the prefill of an identical recent
prompt), then runs one batched decode step for every running sequence. Finished sequences
leave the batch at once and the last slot moves into the hole, so the batch stays contiguous and no compute is spent on dead rows.

Every state change other than `submit` (abort, pause, weight updates, cache flushes) runs on
the loop thread between steps via `call`, so the model and caches need no locks.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

import torch

from loongsage.inference.embedded.kv_cache import KVCache, PrefillResult, PromptCache
from loongsage.inference.embedded.llama import LlamaModel
from loongsage.inference.embedded.request import Sequence
from loongsage.inference.embedded.sampling import noise_size, sample_tokens, token_logprobs, top_logprobs

log = logging.getLogger(__name__)

# Prompt logits are materialised [chunk, vocab] at a time: a 2k-token prompt at 49k vocab
# would otherwise need ~400 MB at once.
PROMPT_LOGITS_CHUNK = 256
# Padded tokens per batched prefill forward: big enough for efficient matmuls, small enough
# that activations and the stacked keys/values of many long prompts stay modest.
PREFILL_TOKENS = 4096
# A new prompt continues a cached prompt's keys/values when they open with at least this many
# common tokens; below it the saving is not worth a forward of its own.
MIN_SHARED_PREFIX = 8


def cache_slots(max_running: int) -> int:
    """KV cache slots for `max_running` sequences: room for the widest decode step over them."""
    if max_running <= 2:
        return max_running
    return 4 if max_running <= 4 else -(-max_running // 8) * 8


def decode_width(rows: int, slots: int) -> int:
    """How many cache slots a decode step over `rows` sequences runs (at most `slots`): MKL's
    skinny matmuls are much faster at some widths than at fewer rows, so idle slots ride along.
    SmolLM2-135M's weight matmuls per step on 2 cores (bench/roofline.py): 1 row 46 ms, 2-15 rows
    72-124 ms, 16 rows 56 ms, 17-23 rows 74-112 ms, 24 rows 77 ms, 32 rows 79 ms. One row keeps
    its own fast path; 2-16 rows run 16 wide; beyond, multiples of 8."""
    if rows <= 1:
        return rows
    return min(slots, 16 if rows <= 16 else -(-rows // 8) * 8)


# SGLang's abort finish_reason carries status_code and err_type (null for these aborts).
REQUEST_ABORT = {"type": "abort", "message": "aborted by request", "status_code": None, "err_type": None}
PAUSE_ABORT = {**REQUEST_ABORT, "message": "aborted by /pause_generation (mode abort)"}


class Unavailable(RuntimeError):
    """The engine takes no new requests for now (memory released, weights not loaded): HTTP 503."""


@dataclass
class SchedulerStats:
    prefills: int = 0
    prompt_cache_hits: int = 0
    decode_steps: int = 0
    decoded_tokens: int = 0
    max_batch_size: int = 0
    # Wall seconds of the scheduler thread in admissions (prefill and first tokens) and in decode
    # steps (`bench engine` sets them against this machine's bound).
    prefill_s: float = 0.0
    decode_s: float = 0.0


class Scheduler:
    def __init__(
        self,
        model: LlamaModel,
        max_running: int,
        max_context: int,
        prompt_cache_size: int = 16,
        decode: Callable[[list[int]], str] | None = None,
        seed: int = 0,
    ):
        cfg = model.cfg
        dtype = next(model.parameters()).dtype
        self.model = model
        self.max_running = max_running
        self.cache = KVCache(cfg.num_layers, cache_slots(max_running), cfg.num_kv_heads, cfg.head_dim, max_context, dtype)
        self.prompts = PromptCache(prompt_cache_size)
        self.decode_text = decode
        self.rng = torch.Generator().manual_seed(seed)
        self.stats = SchedulerStats()
        self.running: list[Sequence] = []
        self.paused = False
        self.refusal: str | None = None  # why `submit` refuses new requests, when it does
        self._waiting: deque[Sequence] = deque()
        self._commands: deque[tuple[Callable, Future]] = deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="engine-scheduler", daemon=True)

    # ---- thread-safe API -------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join()

    def submit(self, seq: Sequence) -> None:
        """Raises Unavailable while the engine refuses requests."""
        with self._cond:
            if self.refusal is not None:
                raise Unavailable(self.refusal)
            self._waiting.append(seq)
            self._cond.notify()

    def call(self, fn: Callable, timeout: float | None = None):
        """Run `fn()` on the loop thread between two steps and return its result."""
        future: Future = Future()
        with self._cond:
            if self._stopping:
                raise RuntimeError("scheduler is stopped")
            self._commands.append((fn, future))
            self._cond.notify()
        return future.result(timeout)

    def pause(self, abort: bool = False) -> int:
        """No admissions and no steps until `resume`; requests submitted meanwhile wait. With
        `abort` (SGLang's pause mode "abort") every request in flight ends first, answered with its
        partial output; without, they stay in the batch (mode "in_place"). Returns how many ended."""

        def pause() -> int:
            self.paused = True
            return self._abort(None, PAUSE_ABORT) if abort else 0

        return self.call(pause)

    def resume(self) -> None:
        self.call(lambda: setattr(self, "paused", False))

    def abort(self, rid: str | None) -> int:
        """Abort one request by rid, or all when rid is None. Returns how many were aborted."""
        return self.call(lambda: self._abort(rid))

    # ---- loop thread -------------------------------------------------------------------
    def refuse_if_idle(self, reason: str | None) -> int:
        """Set the refusal only when no request runs or waits, in one step with that check, so that
        none slips in between; returns how many are in flight (0: set)."""
        with self._cond:
            in_flight = len(self.running) + len(self._waiting)
            if not in_flight:
                self.refusal = reason
        return in_flight

    def refuse(self, reason: str | None) -> None:
        with self._cond:
            self.refusal = reason

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not (self._stopping or self._commands or self._has_work()):
                    self._cond.wait()
                if self._stopping:
                    break
                commands, self._commands = self._commands, deque()
            for fn, future in commands:
                self._run_command(fn, future)
            # Not kept while waiting for the next command: a weight update's closure holds its
            # tensors, which may map the sender's shared memory (transport cuda_ipc).
            commands = fn = future = None
            # Taken after the commands ran: a pause among them must stop admissions too.
            with self._cond:
                admitted = self._take_waiting()
            if admitted:
                started = time.perf_counter()
                self._admit(admitted)
                self.stats.prefill_s += time.perf_counter() - started
            if self.running and not self.paused:
                started = time.perf_counter()
                try:
                    self._decode_step()
                except Exception as exc:
                    self._fail(list(self.running), exc)
                self.stats.decode_s += time.perf_counter() - started
        self._shutdown()

    def _fail(self, seqs: list[Sequence], exc: Exception) -> None:
        log.exception("embedded engine step failed; aborting %d request(s)", len(seqs))
        reason = {"type": "abort", "message": f"engine error: {type(exc).__name__}: {exc}"}
        for seq in seqs:
            seq.error = reason["message"]
            if seq.slot >= 0:
                self._retire(seq, reason)
            elif seq.finish_reason is None:
                seq.finish(reason)

    def _has_work(self) -> bool:
        return not self.paused and bool(self._waiting or self.running)

    def _take_waiting(self) -> list[Sequence]:
        if self.paused:
            return []
        free = self.max_running - len(self.running)
        return [self._waiting.popleft() for _ in range(min(free, len(self._waiting)))]

    @staticmethod
    def _run_command(fn: Callable, future: Future) -> None:
        try:
            future.set_result(fn())
        except BaseException as exc:  # the caller re-raises it; the loop must survive
            future.set_exception(exc)

    def _admit(self, seqs: list[Sequence]) -> None:
        """Prefill the new prompts together, put the sequences into slots, and sample every
        first token in one batch."""
        started, first_logits = [], []
        for seq, entry in self._prefill(seqs):
            try:  # one bad request must not take the engine down
                if seq.wants_prompt_logprobs:
                    seq.input_logprobs = ([None] + entry.prompt_logprobs)[seq.logprob_start_len :]
                    if seq.top_k_wanted:
                        seq.input_top_logprobs = ([None] + _top_rows(entry.prompt_top, seq.top_k_wanted))[seq.logprob_start_len :]
                if seq.return_routed_experts:
                    seq.routed_experts.append(entry.experts)
                if seq.params.max_new_tokens == 0:
                    seq.finish({"type": "length", "length": 0})
                    continue
                self.cache.write(len(self.running), entry.keys, entry.values)
            except Exception as exc:
                self._fail([seq], exc)
                continue
            seq.slot = len(self.running)
            self.running.append(seq)
            started.append(seq)
            first_logits.append(entry.last_logits)
        if started:
            try:
                self._advance(started, torch.stack(first_logits))
            except Exception as exc:
                self._fail(started, exc)

    def _prefill(self, seqs: list[Sequence]) -> list[tuple[Sequence, PrefillResult]]:
        """Each sequence with its prompt's prefill: from the prompt cache, or computed once per
        distinct prompt in batched forwards that continue the longest cached prefix. Sequences
        whose forward failed are failed here and left out."""
        groups: dict[tuple[int, ...], list[Sequence]] = {}
        for seq in seqs:
            groups.setdefault(tuple(seq.prompt_ids), []).append(seq)
        entries: dict[tuple[int, ...], PrefillResult] = {}
        missing = []
        for key, group in groups.items():
            top_k = _prompt_logprobs_wanted(group)
            entry = self.prompts.get(key)
            if entry is not None and (top_k is None or entry.holds_prompt_logprobs(top_k)):
                entries[key] = entry
            else:
                missing.append((key, top_k))
        self._prefill_common_prefix(missing)
        computed, reused_prefix = set(), {}
        for (prefix, shared), items in self._plan_by_prefix(missing):
            for batch in _prefill_batches(items):
                try:
                    entries.update(self._prefill_batch(batch, prefix, shared))
                except Exception as exc:
                    self._fail([s for key, _ in batch for s in groups[key]], exc)
                    continue
                for key, _ in batch:
                    # Scoring requests (max_new_tokens=0) are one-off prompt+response texts; caching
                    # them would only evict the GRPO prompts that do repeat.
                    if any(s.params.max_new_tokens > 0 for s in groups[key]):
                        self.prompts.put(key, entries[key])
                    computed.add(key)
                    reused_prefix[key] = shared
        out = []
        for key, group in groups.items():
            if key not in entries:
                continue
            # The first sequence of a freshly computed prompt paid for its prefill (less any cached
            # prefix it continued); every other one reuses it, from the prompt cache or from a twin.
            payer, reusers = (group[0], group[1:]) if key in computed else (None, group)
            if payer is not None:
                payer.cached_tokens = reused_prefix[key]
            self.stats.prefills += key in computed
            self.stats.prompt_cache_hits += len(reusers)
            for seq in reusers:
                seq.cached_tokens = len(key)
            out.extend((seq, entries[key]) for seq in group)
        return out

    def _prefill_common_prefix(self, missing: list[tuple[tuple[int, ...], bool]]) -> None:
        """Distinct prompts usually open alike (system prompt, chat template): when several new
        ones share a prefix no cached prompt covers, prefill it once as a prompt of its own, so
        that each of them only computes what comes after it."""
        uncovered = [
            key for key, top_k in missing if top_k is None and self.prompts.longest_prefix(key, MIN_SHARED_PREFIX)[1] == 0
        ]
        if len(uncovered) < 2:
            return
        shared = min(len(os.path.commonprefix(uncovered)), min(map(len, uncovered)) - 1)
        if shared < MIN_SHARED_PREFIX:
            return
        prefix = uncovered[0][:shared]
        try:
            self.prompts.put(prefix, self._prefill_batch([(prefix, False)], None, 0)[prefix])
        except Exception:  # only an optimisation: the prompts still prefill in full
            log.exception("prefill of a shared prompt prefix failed")
            return
        self.stats.prefills += 1

    def _plan_by_prefix(self, missing: list[tuple[tuple[int, ...], bool]]):
        """Missing prompts grouped by the cached prefill they continue and its length ((None, 0)
        for none). Prompts that want prompt logprobs prefill in full: those need every position's hidden state."""
        plans: dict[tuple[int, int], tuple[tuple[PrefillResult | None, int], list]] = {}
        for key, top_k in missing:
            prefix, shared = (None, 0) if top_k is not None else self.prompts.longest_prefix(key, MIN_SHARED_PREFIX)
            plans.setdefault((id(prefix), shared), ((prefix, shared), []))[1].append((key, top_k))
        return list(plans.values())

    def _prefill_batch(
        self, batch: list[tuple[tuple[int, ...], bool]], prefix: PrefillResult | None, shared: int
    ) -> dict[tuple[int, ...], PrefillResult]:
        """Prefills the prompts in `batch` after their first `shared` tokens, whose keys/values
        `prefix` holds (none when shared == 0)."""
        past = None if prefix is None else (prefix.keys[:, :, :shared], prefix.values[:, :, :shared])
        tails = [torch.tensor(key[shared:]) for key, _ in batch]
        routed = [] if self.model.cfg.moe else None  # kept with the prompt: any later request may want it
        hidden, keys, values = self.model.prefill_batch(tails, past, routed)
        experts = _by_token(routed)
        with torch.inference_mode():
            last_logits = self.model.logits(torch.stack([h[t.shape[0] - 1] for h, t in zip(hidden, tails)]))
        entries = {}
        for i, ((key, top_k), tail) in enumerate(zip(batch, tails)):
            n = tail.shape[0]
            with torch.inference_mode():
                prompt_lps, prompt_top = self._prompt_logprobs(hidden[i, :n], tail, top_k) if top_k is not None else (None, None)
            # Copies (by clone or cat): a view would keep the whole padded batch alive as long as
            # the prompt cache holds it.
            own_keys, own_values = keys[:, i, :, :n], values[:, i, :, :n]
            if past is None:
                own_keys, own_values = own_keys.clone(), own_values.clone()
            else:
                own_keys, own_values = torch.cat((past[0], own_keys), dim=2), torch.cat((past[1], own_values), dim=2)
            own_experts = None
            if experts is not None:
                own_experts = experts[i, :n].clone() if past is None else torch.cat((prefix.experts[:shared], experts[i, :n]))
            entries[key] = PrefillResult(own_keys, own_values, last_logits[i].clone(), prompt_lps, prompt_top, own_experts)
        return entries

    def _prompt_logprobs(self, hidden: torch.Tensor, ids: torch.Tensor, top_k: int) -> tuple[list[float], tuple | None]:
        """Each prompt token's logprob given the ones before it, and with `top_k` > 0 the (ids,
        logprobs) [T - 1, top_k] of the most likely tokens at each of those positions."""
        out, tops = [], []
        for start in range(0, ids.shape[0] - 1, PROMPT_LOGITS_CHUNK):
            end = min(start + PROMPT_LOGITS_CHUNK, ids.shape[0] - 1)
            logits = self.model.logits(hidden[start:end])
            out.append(token_logprobs(logits, ids[start + 1 : end + 1]))
            if top_k:
                tops.append(top_logprobs(logits, top_k))
        if not top_k:
            return (torch.cat(out).tolist() if out else []), None
        if not tops:
            return [], (torch.empty(0, top_k, dtype=torch.long), torch.empty(0, top_k))
        return torch.cat(out).tolist(), (torch.cat([i for i, _ in tops]), torch.cat([v for _, v in tops]))

    def _decode_step(self) -> None:
        running = self.running
        # The padding rows decode token 0 at position 0 of free slots: admission overwrites those
        # cache rows before any sequence reads them.
        idle = decode_width(len(running), self.cache.shape[1]) - len(running)
        ids = torch.tensor([s.output_ids[-1] for s in running] + [0] * idle)
        positions = torch.tensor([s.cached_length for s in running] + [0] * idle)
        self.cache.ensure(int(positions.max()) + 1)
        routed = [] if any(s.return_routed_experts for s in running) else None
        hidden = self.model.decode(ids, positions, self.cache.keys, self.cache.values, routed)
        with torch.inference_mode():
            logits = self.model.logits(hidden)[: len(running)]
        if routed is not None:
            experts = _by_token(routed)
            for row, seq in enumerate(running):
                if seq.return_routed_experts:
                    seq.routed_experts.append(experts[row])
        self.stats.decode_steps += 1
        self.stats.max_batch_size = max(self.stats.max_batch_size, len(running))
        self._advance(list(running), logits)

    def _advance(self, seqs: list[Sequence], logits: torch.Tensor) -> None:
        """Sample one token per sequence from its logits row, then retire the finished ones."""
        noise = self._exp_noise(seqs, logits.shape[-1])
        failed: list[tuple[Sequence, Exception]] = []
        try:
            tokens, logprobs = sample_tokens(logits, *_sampling_rows(seqs), noise)
            sampled = list(zip(seqs, tokens.tolist(), logprobs.tolist()))
        except Exception:
            # One request's parameters must not fail the others' step: sample row by row, with
            # the same noise (so each row draws what it would have in the batch), and fail only
            # the rows that fail alone.
            log.exception("batched sampling failed; sampling %d row(s) one by one", len(seqs))
            sampled = []
            for i, seq in enumerate(seqs):
                try:
                    token, logprob = sample_tokens(logits[i : i + 1], *_sampling_rows([seq]), noise[i : i + 1])
                    sampled.append((seq, int(token[0]), float(logprob[0])))
                except Exception as exc:
                    failed.append((seq, exc))
        self.stats.decoded_tokens += len(sampled)
        rows = {id(seq): i for i, seq in enumerate(seqs)}
        for seq, token, logprob in sampled:
            seq.output_ids.append(token)
            seq.output_logprobs.append(logprob)
            if seq.top_k_wanted:
                ids, values = top_logprobs(logits[rows[id(seq)] : rows[id(seq)] + 1], seq.top_k_wanted)
                seq.output_top_logprobs.append((ids[0].tolist(), values[0].tolist()))
        # Retire only once every row has its token: `cached_length`, which sizes the slot move,
        # counts the position this step wrote only after the append.
        for seq, exc in failed:
            self._fail([seq], exc)
        for seq, _, _ in sampled:
            reason = self._finish_reason(seq, seq.output_ids[-1])
            if reason is not None:
                self._retire(seq, reason)

    def _exp_noise(self, seqs: list[Sequence], vocab: int) -> torch.Tensor:
        """Exp(1) draws per row from the request's own generator (or the engine's), so a seeded
        request consumes the same random stream whatever else is in the batch."""
        noise = torch.ones(len(seqs), noise_size(vocab))
        for row, seq in zip(noise, seqs):
            if seq.params.temperature > 0:
                row.exponential_(generator=seq.generator or self.rng)
        return noise

    def _finish_reason(self, seq: Sequence, token: int) -> dict | None:
        if token in seq.stop_ids:
            return {"type": "stop", "matched": token}
        if seq.params.stop and self.decode_text is not None:
            text = self.decode_text(seq.output_ids)
            matched = next((s for s in seq.params.stop if s in text), None)
            if matched is not None:
                return {"type": "stop", "matched": matched}
        if len(seq.output_ids) >= seq.params.max_new_tokens:
            return {"type": "length", "length": len(seq.output_ids)}
        return None

    def _retire(self, seq: Sequence, reason: dict) -> None:
        last = self.running.pop()
        if last is not seq:
            self.cache.move(last.slot, seq.slot, last.cached_length)
            last.slot = seq.slot
            self.running[seq.slot] = last
        seq.slot = -1
        seq.finish(reason)

    def _abort(self, rid: str | None, reason: dict | None = None) -> int:
        reason = dict(reason or REQUEST_ABORT)  # a copy: the answers hand it out
        with self._cond:
            hit = [s for s in self._waiting if rid is None or s.rid == rid]
            for seq in hit:
                self._waiting.remove(seq)
        for seq in hit:
            seq.finish(reason)
        running = [s for s in self.running if rid is None or s.rid == rid]
        for seq in running:
            self._retire(seq, reason)
        return len(hit) + len(running)

    def _shutdown(self) -> None:
        reason = {"type": "abort", "message": "engine stopped"}
        for seq in list(self.running):
            self._retire(seq, reason)
        for seq in self._waiting:
            seq.finish(reason)
        self._waiting.clear()
        for _, future in self._commands:
            future.set_exception(RuntimeError("scheduler is stopped"))


def _by_token(routed: list[torch.Tensor] | None) -> torch.Tensor | None:
    """Per-layer chosen experts [N, T, k] -> [N, T, layers, k] int32 (SGLang's order and type)."""
    if routed is None:
        return None
    return torch.stack(routed, dim=2).to(torch.int32)


def _sampling_rows(seqs: list[Sequence]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row temperature, top_p and top_k of `seqs`."""
    params = [s.params for s in seqs]
    return (
        torch.tensor([p.temperature for p in params]),
        torch.tensor([p.top_p for p in params]),
        torch.tensor([p.top_k for p in params]),
    )


def _prompt_logprobs_wanted(group: list[Sequence]) -> int | None:
    """None: no sequence of this prompt wants its prompt's logprobs; else the largest top-k
    any of them wants with them (0: the tokens' own logprobs only)."""
    wanting = [s.top_k_wanted for s in group if s.wants_prompt_logprobs]
    return max(wanting) if wanting else None


def _top_rows(prompt_top: tuple[torch.Tensor, torch.Tensor], k: int) -> list[tuple[list[int], list[float]]]:
    """The first `k` of each position's top tokens (a cached prefill may hold more)."""
    ids, values = prompt_top
    return list(zip(ids[:, :k].tolist(), values[:, :k].tolist()))


def _prefill_batches(prompts: list[tuple[tuple[int, ...], int | None]]) -> list[list[tuple[tuple[int, ...], int | None]]]:
    """Groups prompts, sorted by length to limit padding, so each group's padded size stays
    within PREFILL_TOKENS (a longer prompt gets a forward of its own)."""
    batches: list[list] = []
    for item in sorted(prompts, key=lambda p: len(p[0])):
        # Sorted ascending, so the newest member is the longest and sets the padded width.
        if batches and len(item[0]) * (len(batches[-1]) + 1) <= PREFILL_TOKENS:
            batches[-1].append(item)
        else:
            batches.append([item])
    return batches
