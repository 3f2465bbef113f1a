"""CompletionSampler: a prompt group's sampled completions (`Sample`s), requested from the rollout
engines' fleet through one event loop that every rollout thread shares."""

from __future__ import annotations

import asyncio
import random
import threading
from functools import cached_property

from loongsage.config import RolloutConfig
from loongsage.controller.data_stream import Item
from loongsage.controller.request_loop import RequestLoop
from loongsage.inference.engine_pool import EnginePool
from loongsage.inference.fleet import EngineFleet
from loongsage.inference.resumable import generate_resumable
from loongsage.models import is_mixture_of_experts
from loongsage.sample import Sample

MAX_RESUMES = 64  # weight updates one response may live through; the staleness window drops it long before


class CompletionSampler:
    def __init__(self, cfg: RolloutConfig, engines: EngineFleet, model_path: str):
        self.cfg = cfg
        self.engines = engines
        self.model_path = model_path
        # An MoE policy's routing comes back with every response: the trainer compares its own
        # with it (train/routing_mismatch) and, with algorithm.routing_replay, replays it.
        self._routing = {"return_routed_experts": True} if is_mixture_of_experts(model_path) else {}
        self._tokenizer_lock = threading.Lock()
        self._requests = RequestLoop("rollout-requests")

    @cached_property
    def _pool(self) -> EnginePool:
        return EnginePool(self.engines.roster, self.cfg.request_timeout_s)

    def generate_group(self, item: Item, index: int, seed: int) -> list[Sample]:
        """`group_size` samples of the `index`-th group of the run (counting from 0), each request
        seeded by (seed, step, group in step, member), so a group samples the same whatever the
        run mode and however many groups run beside it. Callable from any thread."""
        step, group_in_step = divmod(index, self.cfg.prompts_per_step)
        # One thread at a time: a fast tokenizer's call reconfigures its Rust backend (padding and
        # truncation), which raises "Already borrowed" when another thread is inside it.
        with self._tokenizer_lock:
            prompt_text = self._tokenizer.apply_chat_template(item.messages, add_generation_prompt=True, tokenize=False)
            prompt_ids = self._tokenizer(prompt_text, add_special_tokens=False)["input_ids"]
        return self._requests.run(self._group(item, prompt_text, prompt_ids, index, f"{seed}:{step + 1}:{group_in_step}"))

    def close(self) -> None:
        """Once the engines are stopped: a rollout thread still waiting on a request gets
        RequestLoopClosed rather than waiting forever."""
        self._requests.close(last=self._close_pool())

    async def _close_pool(self) -> None:
        if "_pool" in self.__dict__:  # never started: nothing to close
            await self._pool.aclose()

    async def _group(self, item: Item, prompt_text: str, prompt_ids: list[int], index: int, seed_key: str) -> list[Sample]:
        # A whole group goes to one engine (the pool's affinity on its index), so its prompt
        # cache prefills the prompt once.
        jobs = []
        for member in range(self.cfg.group_size):
            request_seed = random.Random(f"rollout:{seed_key}:{member}").getrandbits(31)
            jobs.append(self._sample(item, prompt_text, prompt_ids, index, request_seed))
        try:
            return list(await asyncio.gather(*jobs))
        finally:
            self._pool.forget(index)

    async def _sample(self, item: Item, prompt_text: str, prompt_ids: list[int], index: int, request_seed: int) -> Sample:
        sampling_params = {
            "temperature": self.cfg.temperature,
            "top_p": self.cfg.top_p,
            "top_k": self.cfg.top_k,
            "sampling_seed": request_seed,
        }

        async def call(input_ids: list[int], params: dict, rid: str) -> dict:
            with self.engines.activity.request():
                return await self._pool.call(
                    index,
                    lambda client: client.agenerate(
                        input_ids=input_ids, sampling_params=params, return_logprob=True, rid=rid, **self._routing
                    ),
                )

        generation = await generate_resumable(call, list(prompt_ids), sampling_params, self.cfg.max_new_tokens, MAX_RESUMES)
        response_ids = generation.output_ids
        return Sample(
            prompt_ids=list(prompt_ids),
            response_ids=response_ids,
            response_logprobs=generation.logprobs,
            loss_mask=[1] * len(response_ids),
            weight_versions=generation.versions,
            routed_experts=generation.routed_experts,
            group_id=index,
            finish_reason=generation.finish.get("type", "stop"),
            prompt_text=prompt_text,
            # One call's text is the whole response unless it was resumed; then decode the ids.
            response_text=generation.text if not generation.resumes else self._decode(response_ids),
            label=item.label,
            metadata={"item_id": item.id, "resumes": generation.resumes},
        )

    @cached_property
    def _tokenizer(self):
        from loongsage.models import load_tokenizer

        return load_tokenizer(self.model_path)

    def _decode(self, ids: list[int]) -> str:
        with self._tokenizer_lock:
            return self._tokenizer.decode(ids, skip_special_tokens=True)
