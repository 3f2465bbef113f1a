from loongsage.models.registry import (
    DEFAULT_MODEL,
    MODELS,
    hf_config,
    import_causal_lm_code,
    is_mixture_of_experts,
    load_base_model,
    load_causal_lm,
    load_tokenizer,
    resolve_model_path,
)

__all__ = [
    "DEFAULT_MODEL",
    "MODELS",
    "hf_config",
    "import_causal_lm_code",
    "is_mixture_of_experts",
    "load_base_model",
    "load_causal_lm",
    "load_tokenizer",
    "resolve_model_path",
]
