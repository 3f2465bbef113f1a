"""Discrete-event model of one RL run on a GPU cluster: synchronous (colocated) vs fully
asynchronous (disaggregated) at equal GPUs, driving the real staleness windows and pipeline.

    python -m loongsage.bench async --simulate [--gpus 64] [--rollout-gpus 48] [--tp 1]
        [--prompts 64] [--group 16] [--steps 20] [--lengths lognormal|mixture|constant]
        [--window window_gated] [--max-staleness 2] [--seed 0] [--json PATH] [cost constants]

Both modes run the same workload (same seed: group i gets the same response lengths in
both) through the same engine and trainer cost model; they differ only in where the GPUs
are and which window rules the pipeline. Printed per mode: wall time for `--steps` steps,
GPU utilization (busy GPU-seconds / total GPU-seconds), trainer and rollout idle ratios,
staleness mean/max, dropped groups; and the ratio sync wall / async wall.

What is real and what is modelled
---------------------------------
Real: admission, batching, staleness and dropping are `PipelineBuffer` over a window from
`build_window` (loongsage/controller/pipeline.py, windows.py): groups start via
`try_start()` whenever the engines have room for a whole group, finished groups go in via
`finish()`, the trainer calls `try_take(version)` whenever it is idle and something changed,
and `published()` after each weight sync. Modelled: every duration, from the constants below.

Sync (colocated, as verl / slime synchronous): all `--gpus` GPUs are `gpus / tp` engines,
then all of them train, then weights are synced, taking turns. It is the *same* simulator
and the same buffer code with `window_gated` and `max_staleness = 0` (AReaL's rule with eta =
0 starts exactly one batch, which is trained before the next may start), on the colocated
cluster. That keeps the comparison honest: the engine and trainer models, dispatch and
prefill are identical; only placement, window and weight-sync cost differ. The simulator
checks that in this mode rollout and training never overlap (`overlap_s` = 0).

Async (disaggregated at equal GPUs): `--rollout-gpus` (default 3/4 of the GPUs) serve
`rollout_gpus / tp` engines, the rest train. After each training step the weights are
broadcast; during that `--weight-sync-s` every engine pauses (partial rollout: in-flight
sequences keep their tokens and continue on the new weights; no new group starts during the
pause). A group's `oldest_version` is the weight version when it started (its first token);
staleness at a step at version v is `v - oldest_version`. The trainer does train -> sync ->
train; it does not overlap the broadcast with the next step.

Cost model (defaults: a 7B dense model, bf16, tp = 1 on 80-GB H100-class GPUs)
-------------------------------------------------------------------------------
Engine (continuous batching, as SGLang): up to `--max-running 256` sequences at once (KV
memory of a 7B GQA model, ~57 KB/token, in ~60 GB left after weights holds ~256 sequences of
~4k context). One decode step advances every running sequence by one token and takes
    t_step = --step-base-s 0.007 + --step-per-seq-s 0.0001 * running.
The base is reading 15 GB of weights at ~3 TB/s plus launch overhead (~5-7 ms measured for
7-8B models at batch 1 on H100); the per-sequence term is mostly KV-cache reads at a few-k
context. So decoding is memory-bound: 16 sequences take 8.6 ms a step, 256 take 32.6 ms —
16x the work for 3.8x the time. Each admitted sequence costs a prefill of
`--prompt-len / --prefill-tokens-per-s` (512 / 16000 = 32 ms) during which that engine
does not decode (no prefix sharing between the samples of a group is assumed: pessimistic
for both modes alike). Samples are dispatched one by one to the least-loaded engine.
Between events (an admission, a completion, a pause) the running set of each engine is
constant, so the simulator jumps from one completion to the next instead of stepping tokens.

Trainer: a step on a batch of T tokens (prompt + response, every sample) takes
    T / (--train-tokens-per-s-per-gpu 3000 * trainer_gpus) + --train-overhead-s 5.
3000 tokens/s/GPU is a 7B model at ~30-35% MFU (6 * 7e9 FLOPs/token for forward+backward plus
2 * 7e9 for recomputing old log-probs, ~1e15 FLOP/s peak), with long-context attention on
top. Linear scaling in GPUs (FSDP data parallel) is what makes the colocated trainer
(64 GPUs) 4x faster per step than the async trainer slice (16 GPUs): the equal-GPU
comparison gives sync its full advantage there. The overhead covers optimizer step,
data movement and launch.

Weight sync: async `--weight-sync-s 3` per step (NCCL broadcast of 15 GB from the trainer to
the engines, with pause / flush; MoonshotAI's checkpoint-engine does 1T parameters in ~20 s);
sync `--colocate-switch-s 5` per step (CUDA-IPC weight update plus releasing and resuming
engine / trainer memory, as `release_memory_occupation` / `resume_memory_occupation`).
Weight-sync time counts as idle for every GPU.

Workload: `--prompts 64` prompts x `--group 16` samples per step, `--prompt-len 512` tokens
each, response lengths capped at `--max-new-tokens 32768`:
- `lognormal` (default): median `--median-len 2048`, sigma `--sigma 1.0`. Mean ~3.3k tokens,
  ~0.3% of samples hit the 32k cap, so almost every batch of 1024 has one sample at the cap.
  This is the shape reported for long-CoT math RL (DAPO / AReaL-boba / DeepScaleR runs: mean
  response a few thousand tokens, 16k-32k budget, a small truncated fraction), and the
  long-tail effect every async peer cites (AReaL, verl fully-async, ROLL Flash).
- `mixture`: most short, few very long: with probability `--long-frac 0.05` uniform in
  [cap/2, cap], else lognormal(median 1024, sigma 0.6). Agentic / multi-turn style.
- `constant`: every response has the lognormal's mean length (capped): the same tokens per
  step with no tail, the control for the mechanism.
Rewards are not modelled: every finished group is kept (no zero-variance filtering).

Metrics: GPU utilization = (engine busy time * tp + training time * trainer GPUs) /
(gpus * wall); an engine is busy while it decodes at least one sequence or prefills, so a
GPU decoding one tail sequence counts as busy: utilization flatters the tail, and
`rollout_tok_per_gpu_s` (response tokens of finished sequences / (rollout GPUs * wall)) shows
how well that busy time is used. Trainer idle ratio: time the trainer waited for a batch /
wall. Rollout idle ratio: mean over engines of (wall - busy) / wall (sync: includes the
training and weight-sync phases). Wall time ends when the last step's weights are published;
groups still in flight then count as in flight, not as waste. The first async step includes
filling the pipeline. Windows drop groups that outlive max_staleness, and those are the long
ones, so async batches hold fewer tokens than sync batches of the same size: the printed
trained-token throughput ratio (async tokens/s over sync tokens/s) corrects the wall-time
ratio for that (default run: 2.91x wall, 2.73x tokens).

Known simplifications: no KV-length growth in t_step, no preemption or KV eviction, no
network contention, no reward / reference-model time, prefill stalls decode (no chunked
prefill), linear trainer scaling. The ratio depends most on batch size per engine, the
tail, and the rollout / trainer split (`--rollout-gpus`); larger batches per step make the
synchronous rollout more efficient and shrink the gain.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import sys
from dataclasses import asdict, dataclass, field

from loongsage.algorithms.staleness_windows import build_window
from loongsage.controller.pipeline import FinishedGroup, PipelineBuffer

INF = math.inf


@dataclass
class SimConfig:
    """Everything one simulated run depends on; every cost constant is overridable."""

    gpus: int = 64
    rollout_gpus: int | None = None  # async only; None = 3/4 of the GPUs (rounded to tp)
    tp: int = 1
    prompts: int = 64  # groups per training batch
    group: int = 16  # samples per group
    steps: int = 20
    prompt_len: int = 512
    lengths: str = "lognormal"  # lognormal | mixture | constant
    median_len: float = 2048.0
    sigma: float = 1.0
    max_new_tokens: int = 32768
    long_frac: float = 0.05
    window: str = "window_gated"
    max_staleness: int = 2
    seed: int = 0
    max_running: int = 256
    step_base_s: float = 0.007
    step_per_seq_s: float = 0.0001
    prefill_tokens_per_s: float = 16000.0
    train_tokens_per_s_per_gpu: float = 3000.0
    train_overhead_s: float = 5.0
    weight_sync_s: float = 3.0
    colocate_switch_s: float = 5.0

    def async_rollout_gpus(self) -> int:
        gpus = self.rollout_gpus if self.rollout_gpus is not None else (self.gpus * 3 // 4)
        gpus -= gpus % self.tp
        if not self.tp <= gpus < self.gpus:
            raise ValueError(
                f"rollout_gpus={gpus} (tp={self.tp}) must leave at least one engine and one trainer GPU out of gpus={self.gpus}"
            )
        return gpus

    def validate(self) -> None:
        if self.gpus < 2 or self.tp < 1 or self.gpus % self.tp:
            raise ValueError(f"gpus={self.gpus} must be >= 2 and a multiple of tp={self.tp}")
        if self.lengths not in LENGTHS:
            raise ValueError(f"lengths={self.lengths!r}; known: {', '.join(LENGTHS)}")
        if self.group > self.max_running * (self.gpus // self.tp):
            raise ValueError(f"group={self.group} does not fit in the engines")
        for name in ("prompts", "group", "steps", "max_running", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")


LENGTHS = ("lognormal", "mixture", "constant")


class Workload:
    """Response lengths per group index, drawn in admission order from one seeded stream, so
    group i has the same lengths in every mode that admits it."""

    def __init__(self, cfg: SimConfig):
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.groups: list[list[int]] = []
        mu = math.log(cfg.median_len)
        self.constant_len = max(1, min(cfg.max_new_tokens, round(math.exp(mu + cfg.sigma**2 / 2))))

    def lengths(self, index: int) -> list[int]:
        while len(self.groups) <= index:
            self.groups.append([self._draw() for _ in range(self.cfg.group)])
        return self.groups[index]

    def mean_len(self, groups: int) -> float:
        """Mean response length of the first `groups` groups."""
        return sum(sum(self.lengths(i)) for i in range(groups)) / (groups * self.cfg.group)

    def _draw(self) -> int:
        cfg, rng = self.cfg, self.rng
        if cfg.lengths == "constant":
            return self.constant_len
        if cfg.lengths == "mixture":
            if rng.random() < cfg.long_frac:
                return rng.randint(cfg.max_new_tokens // 2, cfg.max_new_tokens)
            length = rng.lognormvariate(math.log(cfg.median_len / 2), 0.6)
        else:
            length = rng.lognormvariate(math.log(cfg.median_len), cfg.sigma)
        return max(1, min(cfg.max_new_tokens, round(length)))


class Engine:
    """One inference engine (tp GPUs): a running set advancing one token per decode step.

    `steps` counts decode steps done (fractional between events); a sequence admitted at
    steps s with length L finishes at steps s + L. The engine decodes only after
    `blocked_until` (prefill, weight-sync pause)."""

    def __init__(self, cfg: SimConfig):
        self.cfg = cfg
        self.steps = 0.0
        self.last = 0.0
        self.blocked_until = 0.0
        self.heap: list[tuple[float, int]] = []  # (finish at steps, sequence id)
        self.busy_s = 0.0
        self.next_time = INF

    @property
    def running(self) -> int:
        return len(self.heap)

    def t_step(self) -> float:
        return self.cfg.step_base_s + self.cfg.step_per_seq_s * self.running

    def advance(self, now: float) -> None:
        if self.heap:
            start = max(self.last, self.blocked_until)
            if now > start:
                self.steps += (now - start) / self.t_step()
                self.busy_s += now - start
        self.last = max(self.last, now)

    def block(self, now: float, seconds: float, busy: bool) -> None:
        self.blocked_until = max(self.blocked_until, now) + seconds
        if busy:
            self.busy_s += seconds

    def pause_until(self, until: float) -> None:
        self.blocked_until = max(self.blocked_until, until)

    def refresh(self) -> None:
        if not self.heap:
            self.next_time = INF
            return
        start = max(self.last, self.blocked_until)
        self.next_time = start + max(0.0, self.heap[0][0] - self.steps) * self.t_step()


@dataclass
class _Group:
    index: int
    version: int
    remaining: int
    tokens: int  # prompt + response tokens of all samples


@dataclass
class ModeResult:
    mode: str
    window: str
    max_staleness: int
    engines: int
    rollout_gpus: int
    trainer_gpus: int
    steps: int
    wall_s: float = 0.0
    gpu_util: float = 0.0
    trainer_idle_ratio: float = 0.0
    rollout_idle_ratio: float = 0.0
    staleness_mean: float = 0.0
    staleness_max: int = 0
    dropped_groups: int = 0
    admitted_groups: int = 0
    trained_groups: int = 0
    ready_groups: int = 0
    running_groups: int = 0
    filtered_groups: int = 0
    overlap_s: float = 0.0  # training while some engine decodes
    train_s: float = 0.0
    weight_sync_s: float = 0.0
    trained_tokens: int = 0
    rollout_tok_per_gpu_s: float = 0.0
    step_end_s: list[float] = field(default_factory=list)
    staleness: list[int] = field(default_factory=list)


class Simulation:
    """One run. `colocated`: engines and trainer share all GPUs (sync); else disaggregated."""

    def __init__(self, cfg: SimConfig, *, colocated: bool, window: str, max_staleness: int, workload: Workload | None = None):
        cfg.validate()
        self.cfg = cfg
        self.colocated = colocated
        self.workload = workload or Workload(cfg)
        self.rollout_gpus = cfg.gpus if colocated else cfg.async_rollout_gpus()
        self.trainer_gpus = cfg.gpus if colocated else cfg.gpus - self.rollout_gpus
        self.engines = [Engine(cfg) for _ in range(self.rollout_gpus // cfg.tp)]
        self.slots = len(self.engines) * cfg.max_running
        self.buffer = PipelineBuffer(
            build_window(window, cfg.prompts, max_staleness), max_inflight=max(1, self.slots // cfg.group)
        )
        self.sync_s = cfg.colocate_switch_s if colocated else cfg.weight_sync_s
        self.result = ModeResult(
            "sync" if colocated else "async",
            window,
            max_staleness,
            len(self.engines),
            self.rollout_gpus,
            self.trainer_gpus,
            cfg.steps,
        )
        self.now = 0.0
        self.version = 0
        self.published = 0
        self.trainer_state = "idle"  # idle | train | sync
        self.trainer_until = INF
        self.trainer_idle_since = 0.0
        self.trainer_idle_s = 0.0
        self.paused = False
        self.total_running = 0
        self.free_slots = self.slots
        self.groups: dict[int, _Group] = {}
        self.seq_group: dict[int, int] = {}
        self.seq_len: dict[int, int] = {}
        self.next_seq = 0
        self.finished_tokens = 0

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> ModeResult:
        self._admit()
        self._trainer_try()
        while self.published < self.cfg.steps:
            engine = min(self.engines, key=lambda e: e.next_time)
            t = min(engine.next_time, self.trainer_until)
            if t == INF:
                raise RuntimeError(f"simulation stalled at t={self.now:.1f}s: {self._describe()}")
            self._account(t)
            self.now = t
            if self.trainer_until <= engine.next_time:
                self._trainer_event()
            else:
                self._complete(engine)
            if self.published >= self.cfg.steps:
                break  # the run ends as the last weights are published; nothing new starts
            self._admit()
            self._trainer_try()
        return self._finish()

    def _account(self, t: float) -> None:
        if self.trainer_state == "train" and self.total_running > 0:
            self.result.overlap_s += t - self.now

    # -- rollout ----------------------------------------------------------------------------
    def _admit(self) -> None:
        cfg = self.cfg
        if self.paused:
            return
        while self.free_slots >= cfg.group:
            index = self.buffer.try_start()
            if index is None:
                return
            lengths = self.workload.lengths(index)
            self.groups[index] = _Group(index, self.version, cfg.group, cfg.group * cfg.prompt_len + sum(lengths))
            for length in lengths:
                engine = min(self.engines, key=lambda e: e.running)
                engine.advance(self.now)
                engine.block(self.now, cfg.prompt_len / cfg.prefill_tokens_per_s, busy=True)
                seq = self.next_seq
                self.next_seq += 1
                heapq.heappush(engine.heap, (engine.steps + length, seq))
                self.seq_group[seq] = index
                self.seq_len[seq] = length
                engine.refresh()
            self.total_running += cfg.group
            self.free_slots -= cfg.group

    def _complete(self, engine: Engine) -> None:
        engine.advance(self.now)
        target = engine.heap[0][0]
        engine.steps = max(engine.steps, target)  # float round-off: the event is this completion
        while engine.heap and engine.heap[0][0] <= engine.steps + 1e-6:
            _, seq = heapq.heappop(engine.heap)
            self.total_running -= 1
            self.free_slots += 1
            self.finished_tokens += self.seq_len.pop(seq)
            group = self.groups[self.seq_group.pop(seq)]
            group.remaining -= 1
            if group.remaining == 0:
                del self.groups[group.index]
                self.buffer.finish(
                    FinishedGroup(group.index, group.version, self.version, payload=group.tokens, num_samples=self.cfg.group)
                )
        engine.refresh()

    # -- training ---------------------------------------------------------------------------
    def _trainer_try(self) -> None:
        if self.trainer_state != "idle" or self.published >= self.cfg.steps:
            return
        taken = self.buffer.try_take(self.version)
        if taken is None:
            return
        batch, stats = taken
        if self.colocated and self.total_running:
            raise AssertionError("colocated mode would train while engines decode")
        tokens = sum(group.payload for group in batch)
        train_s = tokens / (self.cfg.train_tokens_per_s_per_gpu * self.trainer_gpus) + self.cfg.train_overhead_s
        self.trainer_idle_s += self.now - self.trainer_idle_since
        self.result.staleness.extend(stats.staleness)
        self.result.trained_tokens += tokens
        self.result.train_s += train_s
        self.trainer_state, self.trainer_until = "train", self.now + train_s

    def _trainer_event(self) -> None:
        if self.trainer_state == "train":
            self.trainer_state, self.trainer_until = "sync", self.now + self.sync_s
            self.result.weight_sync_s += self.sync_s
            self.paused = True
            for engine in self.engines:  # partial rollout: pause, keep tokens, resume on new weights
                engine.advance(self.now)
                engine.pause_until(self.trainer_until)
                engine.refresh()
            return
        # weight sync done: the engines serve version + 1
        self.version += 1
        self.published += 1
        self.buffer.published()
        self.paused = False
        self.result.step_end_s.append(self.now)
        self.trainer_state, self.trainer_until = "idle", INF
        self.trainer_idle_since = self.now

    # -- results ----------------------------------------------------------------------------
    def _finish(self) -> ModeResult:
        r, cfg, wall = self.result, self.cfg, self.now
        for engine in self.engines:
            engine.advance(wall)
        busy_engine = sum(engine.busy_s for engine in self.engines)
        r.wall_s = wall
        r.gpu_util = (busy_engine * cfg.tp + r.train_s * self.trainer_gpus) / (cfg.gpus * wall)
        r.trainer_idle_ratio = self.trainer_idle_s / wall
        r.rollout_idle_ratio = 1.0 - busy_engine / (len(self.engines) * wall)
        r.staleness_mean = sum(r.staleness) / len(r.staleness) if r.staleness else 0.0
        r.staleness_max = max(r.staleness, default=0)
        b = self.buffer
        r.dropped_groups, r.trained_groups, r.admitted_groups = b.dropped_stale, b.trained, b.next_index
        r.ready_groups, r.running_groups, r.filtered_groups = len(b.ready), b.running, b.filtered
        r.rollout_tok_per_gpu_s = self.finished_tokens / (self.rollout_gpus * wall)
        return r

    def _describe(self) -> str:
        b = self.buffer
        return (
            f"version {self.version}, {b.running} running, {len(b.ready)} ready, {b.trained} trained, "
            f"{b.dropped_stale} dropped, trainer {self.trainer_state}"
        )


def simulate(cfg: SimConfig, *, window: str | None = None, max_staleness: int | None = None) -> dict[str, ModeResult]:
    """Both modes on one workload: {"sync": ..., "async": ...}."""
    cfg.validate()
    workload = Workload(cfg)
    sync = Simulation(cfg, colocated=True, window="window_gated", max_staleness=0, workload=workload).run()
    asyn = Simulation(
        cfg,
        colocated=False,
        window=window or cfg.window,
        max_staleness=cfg.max_staleness if max_staleness is None else max_staleness,
        workload=workload,
    ).run()
    return {"sync": sync, "async": asyn}


def main(argv: list[str]) -> int:
    args = _parse(argv)
    cfg = SimConfig(**{name: getattr(args, name) for name in SimConfig.__dataclass_fields__})
    try:
        results = simulate(cfg)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sync, asyn = results["sync"], results["async"]
    mean_len = Workload(cfg).mean_len(cfg.prompts * cfg.steps)
    print(
        f"cluster: {cfg.gpus} GPUs, tp={cfg.tp}; sync colocated {sync.engines} engines + {sync.trainer_gpus} trainer "
        f"GPUs in turns; async {asyn.engines} engines ({asyn.rollout_gpus} GPUs) + {asyn.trainer_gpus} trainer GPUs"
    )
    print(
        f"workload: {cfg.steps} steps x {cfg.prompts} prompts x {cfg.group} samples, lengths={cfg.lengths} "
        f"(mean {mean_len:.0f}, cap {cfg.max_new_tokens}), async window={cfg.window} max_staleness={cfg.max_staleness}"
    )
    for r in (sync, asyn):
        print(
            f"{r.mode:5s}: wall {r.wall_s:9.1f} s ({r.wall_s / r.steps:6.1f} s/step)  gpu_util {r.gpu_util:5.1%}  "
            f"trainer_idle {r.trainer_idle_ratio:5.1%}  rollout_idle {r.rollout_idle_ratio:5.1%}  "
            f"staleness mean {r.staleness_mean:.2f} max {r.staleness_max}  dropped {r.dropped_groups}  "
            f"rollout {r.rollout_tok_per_gpu_s:6.0f} tok/GPU/s  trained {r.trained_tokens / r.steps / 1e6:.2f}M tok/step"
        )
    ratio = sync.wall_s / asyn.wall_s
    token_ratio = (asyn.trained_tokens / asyn.wall_s) / (sync.trained_tokens / sync.wall_s)
    print(f"ratio (sync wall / async wall): {ratio:.2f}x   trained-token throughput ratio (async / sync): {token_ratio:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "config": asdict(cfg),
                    "ratio": ratio,
                    "token_ratio": token_ratio,
                    "sync": _public(sync),
                    "async": _public(asyn),
                },
                f,
                indent=2,
            )
        print(f"wrote {args.json}")
    return 0


def _public(r: ModeResult) -> dict:
    out = asdict(r)
    out.pop("staleness")
    return out


def _parse(argv: list[str]) -> argparse.Namespace:
    d = SimConfig()
    p = argparse.ArgumentParser(prog="python -m loongsage.bench async --simulate", description=__doc__.split("\n")[0])
    p.add_argument("--simulate", action="store_true", help="(the only mode of this module)")
    p.add_argument("--gpus", type=int, default=d.gpus)
    p.add_argument("--rollout-gpus", type=int, default=None, help="async rollout GPUs (default 3/4 of --gpus)")
    p.add_argument("--tp", type=int, default=d.tp)
    p.add_argument("--prompts", type=int, default=d.prompts)
    p.add_argument("--group", type=int, default=d.group)
    p.add_argument("--steps", type=int, default=d.steps)
    p.add_argument("--prompt-len", type=int, default=d.prompt_len)
    p.add_argument("--lengths", choices=LENGTHS, default=d.lengths)
    p.add_argument("--median-len", type=float, default=d.median_len)
    p.add_argument("--sigma", type=float, default=d.sigma)
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens)
    p.add_argument("--long-frac", type=float, default=d.long_frac)
    p.add_argument("--window", default=d.window)
    p.add_argument("--max-staleness", type=int, default=d.max_staleness)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--max-running", type=int, default=d.max_running)
    p.add_argument("--step-base-s", type=float, default=d.step_base_s)
    p.add_argument("--step-per-seq-s", type=float, default=d.step_per_seq_s)
    p.add_argument("--prefill-tokens-per-s", type=float, default=d.prefill_tokens_per_s)
    p.add_argument("--train-tokens-per-s-per-gpu", type=float, default=d.train_tokens_per_s_per_gpu)
    p.add_argument("--train-overhead-s", type=float, default=d.train_overhead_s)
    p.add_argument("--weight-sync-s", type=float, default=d.weight_sync_s)
    p.add_argument("--colocate-switch-s", type=float, default=d.colocate_switch_s)
    p.add_argument("--json", default=None, help="write the numbers here")
    return p.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
