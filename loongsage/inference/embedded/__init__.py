"""Embedded CPU inference engine speaking SGLang's HTTP protocol.

Layers, each in its own module: `llama` (forward pass, HF parameter names), `weights`
(loading and all-or-nothing named updates), `kv_cache` (slot cache + prompt cache),
`sampling`, `scheduler` (continuous batching thread), `protocol` (request validation and
response format), `memory` (releasing and resuming memory for a colocated trainer), `staging`
(a weight-update session's buckets, committed together with the version), `engine`
(ties them together), `weight_group` (the weight-update groups of SGLang's distributed update),
`server` (FastAPI/uvicorn), `actor` (Ray, in-process), `cli`
(`python -m loongsage.inference.embedded`, the engine as a process of its own).

Started as a process it takes SGLang's `launch_server` flags, so that one engine actor runs
`python -m sglang.launch_server <flags>` on GPUs and this module with the same flags on CPUs:
`--model-path` (required), `--host`, `--port`, `--dtype` (auto = float32), `--context-length`,
`--max-running-requests`, `--random-seed`, `--weight-version`. GPU-only flags
(`--mem-fraction-static`, `--enable-memory-saver`, `--base-gpu-id`, `--nccl-port`, ...) are
accepted and reported back by /server_info (and /get_server_info); `--tp-size` takes 1, or across
`--nnodes` a multiple of them, with `--node-rank` and `--dist-init-addr` (node_ranks.py: node rank 0
computes, the others join its rendezvous); an unknown flag exits 2. Threads follow OMP_NUM_THREADS. SIGTERM or SIGINT
stops it with exit 0; a model that does not load exits 1 with one line on stderr.

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
- `/pause_generation` takes SGLang's `{"mode"}`, default "abort": every request in flight ends
  at once, answered 200 with its partial output and finish_reason `{"type": "abort", ...}`.
  "in_place" keeps in-flight requests in the batch. "retract" (SGLang: back to the queue, KV
  recomputed after continue) is in_place here: its callers too get their whole answer after
  `/continue_generation`. In every mode no step runs and new /generate calls wait until
  `/continue_generation`; another mode is a 400 naming `mode`.
- The weight version switches atomically. Inside a weight-update session, tensor and
  distributed updates are staged (`staging`), not applied: the update that carries a
  `weight_version` (a push's last bucket) commits every staged tensor, its own and the version in
  one step between two decode steps. Until then every request is answered by the old weights
  under the old version. `/end_weight_update` with tensors still staged (the sender failed or gave
  up) discards them, keeps the old weights and version, and logs a warning with the count;
  releasing the weights discards them too. The versioned bucket commits what is staged when it
  arrives, so a sender posts it after the other buckets' answers. `/update_weights_from_disk`
  applies at once (no session). /server_info reports `staged_weight_tensors`.
- A commit (or a disk update) always drops the prompt cache, staging never: an update's
  `flush_cache` is accepted and ignored, and never fails (SGLang's answers 400, the weights
  updated, when requests run or wait, e.g. held by an in_place pause). `weight_version` is a
  string or null (anything else a 400 naming it, where SGLang answers 422) and starts as
  "default", like SGLang; /model_info (and /get_model_info, /get_weight_version) report it.
- `/update_weights_from_tensor` and `/update_weights_from_distributed` are refused outside a
  weight-update session (`/begin_weight_update` ... `/end_weight_update`), as SGLang 0.5.23
  refuses them: 400 `{"success": false, "message"}` (see `update_session`);
  `/update_weights_from_disk` needs none. /get_server_info reports `weight_update_session`.
- `/release_memory_occupation` / `/resume_memory_occupation` take `{"tags": [...] | null}`
  (null: all of "weights", "kv_cache", "cuda_graph"; the last is a no-op on CPU); both are
  idempotent. Releasing needs an idle engine (400 naming how many requests are in flight, paused
  or queued ones included). Released weights give their memory back to the OS; resumed ones hold
  zeros, and until weight updates have written every parameter again (staged ones count once
  committed) /generate answers 503 naming how many are missing. While weights or the KV cache are released /generate answers
  503, and a weight update while weights are released too. /get_server_info reports
  `memory_released` and `weights_not_loaded`.
- `/init_weights_update_group` joins a gloo group (nccl is refused: no GPU) as rank
  `rank_offset`, answering once the group has formed; `/update_weights_from_distributed`
  checks names, dtypes and shapes against the model before receiving anything, so a refused
  request leaves the group in step; a broken group (the sender left mid-bucket) is destroyed,
  the model untouched (500), what earlier buckets staged left for `/end_weight_update` to
  discard. /get_server_info reports `tp_size` (1) and `weight_update_groups`.
- Every invalid request is HTTP 400 with `{"error": {"message", "field"}}` (session refusals
  excepted, see above); a request the engine cannot take in its current memory state is 503
  with `{"error": {"message"}}`.
"""
