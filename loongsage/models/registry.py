"""Model names -> local HF directories, plus the loaders everybody uses."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from loongsage.models.smollm2 import smollm2_dir
from loongsage.models.tiny import tiny_dir, tiny_moe_dir
from loongsage.registry import Registry

DEFAULT_MODEL = "smollm2-135m"
# An entry takes no arguments and returns the model's local HF directory (fetching or building it).
# Looked up by name only: anything else in model.name is a directory, not an import path.
MODELS: Registry[Callable[[], Path]] = Registry("model")
MODELS.register(DEFAULT_MODEL, smollm2_dir)
MODELS.register("tiny", tiny_dir)
MODELS.register("tiny-moe", tiny_moe_dir)
MODELS.register_lazy("smollm2-moe", "loongsage.models.upcycle:smollm2_moe_dir")
# The mopd recipe's teachers: made on this machine by loongsage.teachers.make when missing.
MODELS.register_lazy("teacher-sum", "loongsage.teachers.make:teacher_sum")
MODELS.register_lazy("teacher-product", "loongsage.teachers.make:teacher_product")


def resolve_model_path(name_or_path: str) -> Path:
    """A registry name (`smollm2-135m`, `tiny`) or a local HF model directory."""
    if name_or_path in MODELS:
        return MODELS[name_or_path]()
    path = Path(name_or_path).expanduser()
    if (path / "config.json").is_file():
        return path.resolve()
    raise ValueError(
        f"model.name={name_or_path!r} is neither a known model ({', '.join(sorted(MODELS))}) "
        "nor a local Hugging Face model directory with a config.json"
    )


# HF config fields that give an MoE model's expert count (Qwen-MoE, transformers 5's rename of it, DeepSeek).
EXPERT_COUNT_FIELDS = ("num_experts", "num_local_experts", "n_routed_experts")


def hf_config(model_path: str | Path) -> dict:
    """The checkpoint's config.json."""
    return json.loads((Path(model_path) / "config.json").read_text())


def is_mixture_of_experts(model_path: str | Path) -> bool:
    return any(hf_config(model_path).get(field) for field in EXPERT_COUNT_FIELDS)


def load_tokenizer(model_path: str | Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_path))


def load_causal_lm(model_path: str | Path, dtype=None):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(model_path), dtype=dtype or torch.float32)


def import_causal_lm_code(model_path: str | Path) -> None:
    """Imports the checkpoint's model code without building the model: most of a first
    `load_causal_lm`'s time in a fresh process on a CPU (about 2.5 s of 3 for SmolLM2-135M)."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    MODEL_FOR_CAUSAL_LM_MAPPING[type(AutoConfig.from_pretrained(str(model_path)))]


def load_base_model(model_path: str | Path, dtype=None):
    """The checkpoint's transformer without its LM head (what a value model is built on)."""
    import torch
    from transformers import AutoModel

    return AutoModel.from_pretrained(str(model_path), dtype=dtype or torch.float32)
