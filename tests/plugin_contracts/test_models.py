"""Every model entry is called with no arguments by resolve_model_path and returns the local
Hugging Face directory; the default model is one of them."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from loongsage.models.registry import DEFAULT_MODEL, MODELS
from tests.plugin_contracts.call_shapes import accepts


def test_the_default_model_is_registered():
    assert DEFAULT_MODEL in MODELS


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_entry_takes_nothing_and_returns_a_path(name):
    # Signatures only: calling an entry may download the model.
    assert accepts(MODELS[name]), f"{name}: resolve_model_path calls it with no arguments"
    assert typing.get_type_hints(MODELS[name]).get("return") is Path
