"""trainer.backend=megatron: megatron-core GPTModel, parallel_state, DDP and optimizer behind the TrainBackend protocol."""

import warnings

# Without TransformerEngine and apex (any CPU machine) megatron-core says, at import and at every
# model build, that it falls back to its torch implementations: expected here (see cpu_shims),
# and a dozen lines per rank would bury the run's own output.
for _fallback in (
    "Transformer Engine and Apex are not installed",
    "Apex is not installed",
    "full scope is deprecated",
    "When using async grad allreduce",
):
    warnings.filterwarnings("ignore", message=f".*{_fallback}.*", category=UserWarning)
