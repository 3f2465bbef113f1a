"""Math task: synthetic arithmetic and GSM8K-style data, boxed-answer reward."""

from __future__ import annotations

from loongsage.tasks.math.jsonl import SAMPLE_PATH, DatasetFormatError, load_gsm8k_jsonl
from loongsage.tasks.math.prompt import ANSWER_INSTRUCTION, math_prompt
from loongsage.tasks.math.reward import extract_answer, math_reward
from loongsage.tasks.math.synthetic import SyntheticArithmetic

__all__ = [
    "ANSWER_INSTRUCTION",
    "SAMPLE_PATH",
    "DatasetFormatError",
    "SyntheticArithmetic",
    "extract_answer",
    "load_gsm8k_jsonl",
    "math_prompt",
    "math_reward",
]
