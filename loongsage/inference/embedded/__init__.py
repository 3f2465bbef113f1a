"""Embedded CPU inference engine speaking SGLang's HTTP protocol.

Layers, each in its own module: `llama` (forward pass, HF parameter names), `weights`
(loading and all-or-nothing named updates), `kv_cache` (slot cache + prompt cache),
`sampling`, `scheduler` (continuous batching thread), `protocol` (request validation and
response format), `engine` (ties them together), `server` (FastAPI/uvicorn), `actor` (Ray).

Behaviour callers rely on:
- `output_token_logprobs` / `input_token_logprobs` are log-probabilities of the untempered
  model distribution (temperature 1, no top-p/top-k), i.e. what the trainer recomputes.
- A stop token that ends generation is part of `output_ids` and of the logprobs (the trainer
  learns to emit it); `text` omits it unless `no_stop_trim`.
- `stop_token_ids` add to the model's eos ids (generation_config.json, else config.json), as in
  SGLang; `ignore_eos: true` drops the eos ids.
- `sampling_seed` gives a request its own generator: the same request yields the same tokens
  alone or inside any batch.
- `max_new_tokens: 0` with `return_logprob` and `logprob_start_len: 0` scores a sequence
  (teacher logprobs); the first prompt entry's logprob is null.
- `/pause_generation` keeps in-flight requests in the batch and runs no step until
  `/continue_generation`; weight updates apply between two decode steps and always drop the
  prompt cache. `weight_version` starts as "default", like SGLang.
- Every invalid request is HTTP 400 with `{"error": {"message", "field"}}`.
"""
