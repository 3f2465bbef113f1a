"""The embedded engine without HTTP: model, tokenizer, scheduler and weight version."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from pathlib import Path

import torch
from transformers import AutoTokenizer

from loongsage.inference.embedded.memory import MemoryOccupation, trim_heap
from loongsage.inference.embedded.protocol import Limits, build_response, parse_generate
from loongsage.inference.embedded.request import Sequence
from loongsage.inference.embedded.scheduler import Scheduler
from loongsage.inference.embedded.staging import StagedWeights
from loongsage.inference.embedded.weights import DiskTensors, apply_named_tensors, load_model

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclasses.dataclass(frozen=True)
class EngineConfig:
    max_running: int = 32  # KV-cache slots = largest decode batch
    max_context: int = 2048  # prompt + generated tokens per request
    num_threads: int | None = None  # torch intra-op threads; None leaves torch's default
    dtype: str = "float32"
    prompt_cache_size: int = 16  # prefilled prompts kept for reuse (GRPO repeats each prompt)
    seed: int = 0  # for requests without their own sampling_seed
    weight_version: str = "default"  # the version the starting weights carry (SGLang's --weight-version)
    # Keep the storages a weight update replaces for the next one to write into (staging.py: no
    # allocation per push, but a second copy of the weights resident between pushes).
    weight_spares: bool = True
    # R3: requests may ask for the experts each token was routed to (SGLang's --enable-return-routed-experts).
    return_routed_experts: bool = False

    @classmethod
    def from_dict(cls, cfg: dict | None) -> EngineConfig:
        cfg = dict(cfg or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(cfg) - known)
        if unknown:
            raise ValueError(f"unknown engine_cfg key {unknown[0]!r} (known: {sorted(known)})")
        if cfg.get("dtype", "float32") not in DTYPES:
            raise ValueError(f"engine_cfg.dtype={cfg['dtype']!r} must be one of {sorted(DTYPES)}")
        return cls(**cfg)


class GenerationFailed(RuntimeError):
    """The engine itself failed a request (not the request's fault): the server answers 500."""

    def __init__(self, message: str, rid: str):
        super().__init__(message)
        self.rid = rid


class Engine:
    def __init__(self, model_path: str | Path, cfg: EngineConfig | dict | None = None, server_args: dict | None = None):
        """`server_args`: the launch flags /get_server_info reports beside the engine's own
        state (the command-line entry point passes SGLang's flags it was started with)."""
        self.cfg = cfg if isinstance(cfg, EngineConfig) else EngineConfig.from_dict(cfg)
        self.server_args = dict(server_args or {})
        if self.cfg.num_threads:
            torch.set_num_threads(self.cfg.num_threads)
        self.model_path = str(model_path)
        self.model = _load_off_thread(model_path, DTYPES[self.cfg.dtype])
        self.tokenizer = _load_tokenizer(model_path)
        model_cfg = self.model.cfg
        max_context = min(self.cfg.max_context, model_cfg.max_position_embeddings)
        self.limits = Limits(model_cfg.vocab_size, max_context, model_cfg.eos_token_ids, self._routed_experts_refused())
        self.weight_version = self.cfg.weight_version
        self.scheduler = Scheduler(
            self.model,
            self.cfg.max_running,
            max_context,
            self.cfg.prompt_cache_size,
            decode=self.tokenizer.decode if self.tokenizer is not None else None,
            seed=self.cfg.seed,
        )
        self.memory = MemoryOccupation(self.model, self.scheduler)
        # A weight-update session's buckets until they commit.
        self.staged = StagedWeights(self.model, not_loaded=self.memory.not_loaded, keep_spares=self.cfg.weight_spares)
        self.scheduler.start()

    def _routed_experts_refused(self) -> str | None:
        if self.model.cfg.moe is None:
            return f"{self.model_path} is not a mixture-of-experts model"
        if not self.cfg.return_routed_experts:
            return "the engine was started without --enable-return-routed-experts"
        return None

    def stop(self) -> None:
        self.scheduler.stop()

    async def generate(self, body) -> dict | list[dict]:
        """Raises protocol.BadRequest for an invalid body, scheduler.Unavailable while the engine
        refuses requests (memory released, weights not loaded)."""
        request = parse_generate(body, self.limits, self.tokenizer)
        loop = asyncio.get_running_loop()
        futures = []
        for seq in request.sequences:
            future = loop.create_future()
            seq.on_done = _resolver(loop, future, self)
            futures.append(future)
        for seq in request.sequences:
            self.scheduler.submit(seq)
        done = await asyncio.gather(*futures)
        failed = next((seq for seq in request.sequences if seq.error is not None), None)
        if failed is not None:
            # An abort answer would look like a weight-update abort: clients resume those, and
            # after the last resume would hand their agent an empty reply as a success.
            raise GenerationFailed(f"request {failed.rid} failed: {failed.error}", failed.rid)
        responses = [build_response(seq, version, self.tokenizer, request.return_text_in_logprobs) for seq, version in done]
        return responses if request.is_batch else responses[0]

    def flush_cache(self) -> None:
        self.scheduler.call(self.scheduler.prompts.clear)

    def update_weights(self, named_tensors, weight_version: str | None) -> None:
        """Apply at once, all-or-nothing, between two decode steps (updates outside a weight-update
        session: from disk). The prompt cache holds keys/values of the old weights: dropped."""

        def apply():
            self.memory.check_writable()
            self.memory.mark_written(apply_named_tensors(self.model, named_tensors))
            self.scheduler.prompts.clear()
            if weight_version is not None:
                self.weight_version = weight_version

        self.scheduler.call(apply)

    def receive_weights(
        self, named_tensors, weight_version: str | None, owned: bool = False, copy_threads: int = 1
    ) -> tuple[int, int]:
        """One bucket of a push inside a weight-update session (tensor and distributed updates):
        staged, not applied (see `staging`); a bucket that carries `weight_version` then commits
        every staged tensor and the version in one step. `owned`: the tensors were made for this
        call alone, so staging may keep them instead of copying. Raises WeightError (nothing
        staged) or scheduler.Unavailable while the weights are released. Returns (tensors staged
        and waiting, tensors committed): one of them is 0. `copy_threads`: see StagedWeights.stage."""
        self.staged.stage(named_tensors, owned, check=self.memory.check_writable, copy_threads=copy_threads)
        if weight_version is None:
            return self.staged.count, 0
        return 0, self.commit_weights(weight_version)

    def commit_weights(self, weight_version: str) -> int:
        """Every staged tensor into the model, the version with them, in one step between two
        decode steps; the prompt cache goes (its keys/values are the old weights'). Returns how
        many tensors were committed."""

        def commit() -> int:
            self.memory.check_writable()
            # Every write of a resumed model's parameters passes here or through update_weights:
            # the places that track which ones it has been given again.
            written, count = self.staged.commit()
            self.memory.mark_written(written)
            self.scheduler.prompts.clear()
            self.weight_version = weight_version
            return count

        return self.scheduler.call(commit)

    def discard_staged(self, why: str) -> int:
        """Drop what a session staged and never committed; the weights and version stay."""
        dropped = self.staged.discard()
        if dropped:
            log.warning(
                "%s: discarded %d staged weight tensor(s) that no update carrying weight_version committed; "
                "weights and weight_version %r unchanged",
                why,
                dropped,
                self.weight_version,
            )
        return dropped

    def update_weights_from_disk(self, model_path: str, weight_version: str | None) -> None:
        self.update_weights(DiskTensors(model_path), weight_version)
        self.model_path = str(model_path)

    def release_memory(self, tags: tuple[str, ...]) -> None:
        """memory.parse_tags gives `tags`. Raises protocol.BadRequest while requests are in flight."""

        def release():
            self.memory.release(tags)
            if "weights" in tags:  # staged tensors and spares would hold on to the memory given back
                self.discard_staged("release_memory_occupation")
                if self.staged.drop_spares():
                    trim_heap()

        self.scheduler.call(release)

    def resume_memory(self, tags: tuple[str, ...]) -> None:
        self.scheduler.call(lambda: self.memory.resume(tags))

    def model_info(self) -> dict:
        return {
            "model_path": self.model_path,
            "tokenizer_path": self.model_path if self.tokenizer is not None else None,
            "is_generation": True,
            "weight_version": self.weight_version,
        }

    def server_info(self) -> dict:
        scheduler = self.scheduler
        # tp_size as SGLang reports it: the trainer sizes the weight-update group from it.
        return {
            **self.server_args,
            "tp_size": 1,
            **dataclasses.asdict(self.cfg),
            "max_context": self.limits.max_context,
            "paused": scheduler.paused,
            "running": len(scheduler.running),
            "prompt_cache_entries": len(scheduler.prompts),
            "staged_weight_tensors": self.staged.count,
            "weight_spare_bytes": self.staged.spare_bytes,
            "weight_staging_allocations": self.staged.allocations,
            "kv_cache_capacity": scheduler.cache.capacity,
            **self.memory.info(),
            "stats": dataclasses.asdict(scheduler.stats),
        }


def _resolver(loop: asyncio.AbstractEventLoop, future: asyncio.Future, engine: Engine):
    """Completes `future` from the scheduler thread with the weight version current at finish."""

    def on_done(seq: Sequence) -> None:
        result = (seq, engine.weight_version)
        try:
            loop.call_soon_threadsafe(lambda: future.done() or future.set_result(result))
        except RuntimeError:  # the server's loop is closed: nobody waits for this answer
            pass

    return on_done


def _load_off_thread(model_path: str | Path, dtype: torch.dtype):
    """`load_model` on a throwaway thread.

    Loading runs OpenMP parallel regions, and a thread that ran one keeps an idle OpenMP worker
    for life. Next to the scheduler thread's own team that makes more OpenMP threads than cores,
    so libgomp stops spin-waiting and every small op of a decode step pays a futex wake-up
    (measured ~1.3x slower steps on 2 cores). The throwaway thread's team ends with it.
    """
    result: dict = {}

    def load():
        try:
            result["model"] = load_model(model_path, dtype)
        except BaseException as exc:  # re-raised on the caller's thread
            result["error"] = exc

    thread = threading.Thread(target=load, name="engine-load")
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["model"]


def _load_tokenizer(model_path: str | Path):
    if not (Path(model_path) / "tokenizer_config.json").exists():
        return None
    return AutoTokenizer.from_pretrained(str(model_path))
