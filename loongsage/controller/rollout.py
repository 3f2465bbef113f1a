"""RolloutGroup: the inference engines (Ray actors serving SGLang's HTTP protocol) and the
code that turns prompts into sampled `Sample`s through them."""
from __future__ import annotations

import asyncio
import random
from functools import cached_property

import ray

from loongsage.config import RolloutConfig
from loongsage.controller.prompts import Prompt
from loongsage.inference.client import EngineClient
from loongsage.sample import Sample


class RolloutGroup:
    def __init__(self, cfg: RolloutConfig, model_path: str):
        from loongsage.inference.embedded.actor import EmbeddedEngineActor

        self.cfg = cfg
        engine_cfg = {
            "max_running": cfg.max_running,
            "max_context": cfg.max_context,
            "num_threads": cfg.num_threads,
            "dtype": cfg.dtype,
            # Versions count trainer steps; the starting weights are version 0.
            "weight_version": "0",
        }
        self.actors = [EmbeddedEngineActor.remote(model_path, engine_cfg) for _ in range(cfg.num_engines)]
        # Engines load their weights while the caller goes on (e.g. to start the trainer).
        self._started = [actor.start.remote() for actor in self.actors]

    @cached_property
    def urls(self) -> list[str]:
        return ray.get(self._started)

    @cached_property
    def clients(self) -> list[EngineClient]:
        return [EngineClient(url, timeout=self.cfg.request_timeout_s) for url in self.urls]

    def generate(self, prompts: list[Prompt], step: int, seed: int) -> list[Sample]:
        """`group_size` samples per prompt, in prompt order; groups are consecutive."""
        return asyncio.run(self._generate(prompts, step, seed))

    async def _generate(self, prompts: list[Prompt], step: int, seed: int) -> list[Sample]:
        jobs = []
        for group_id, prompt in enumerate(prompts):
            # A whole group goes to one engine, so its prompt cache prefills the prompt once.
            client = self.clients[group_id % len(self.clients)]
            for member in range(self.cfg.group_size):
                request_seed = random.Random(f"rollout:{seed}:{step}:{group_id}:{member}").getrandbits(31)
                jobs.append(self._sample(client, prompt, group_id, request_seed))
        try:
            return list(await asyncio.gather(*jobs))
        finally:
            for client in self.clients:
                await client.aclose()

    async def _sample(self, client: EngineClient, prompt: Prompt, group_id: int, request_seed: int) -> Sample:
        sampling_params = {
            "temperature": self.cfg.temperature,
            "top_p": self.cfg.top_p,
            "top_k": self.cfg.top_k,
            "max_new_tokens": self.cfg.max_new_tokens,
            "sampling_seed": request_seed,
        }
        response = await client.agenerate(input_ids=prompt.token_ids, sampling_params=sampling_params, return_logprob=True)
        meta = response["meta_info"]
        version = int(meta["weight_version"])
        logprobs = [entry[0] for entry in meta["output_token_logprobs"]]
        return Sample(
            prompt_ids=list(prompt.token_ids),
            response_ids=list(response["output_ids"]),
            response_logprobs=logprobs,
            loss_mask=[1] * len(response["output_ids"]),
            weight_versions=[version] * len(response["output_ids"]),
            group_id=group_id,
            finish_reason=meta["finish_reason"]["type"],
            prompt_text=prompt.text,
            response_text=response["text"],
            label=prompt.label,
            metadata={"item_id": prompt.item_id},
        )

    def shutdown(self) -> None:
        ray.get([actor.stop.remote() for actor in self.actors])
