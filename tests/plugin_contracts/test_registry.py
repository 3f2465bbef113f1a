"""Registry: a second entry under a taken name is refused, in the helper and in every real registry."""

from __future__ import annotations

import importlib

import pytest

from loongsage.registry import Registry

# Every registry this project keeps, as "module:NAME" (the tasks' data sources and rewards have their own tests).
REGISTRIES = [
    "loongsage.controller.windows:WINDOWS",
    "loongsage.agentflow.agents.registry:AGENTS",
    "loongsage.agentflow.sandbox:BACKENDS",
    "loongsage.agentflow.router.chat_format:CHAT_FORMATS",
    "loongsage.models.registry:MODELS",
    "loongsage.algorithms.advantages:ADVANTAGE_ESTIMATORS",
    "loongsage.algorithms.losses:POLICY_LOSSES",
    "loongsage.training.backends:TRAIN_BACKENDS",
    "loongsage.inference.engines:ENGINES",
]


def load(path: str) -> Registry:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def first_entry() -> int:
    return 1


def test_a_taken_name_is_refused_naming_both_entries():
    registry = Registry("widget")
    registry.register("one", first_entry)
    with pytest.raises(ValueError, match=r"widget 'one' is already registered .*first_entry.*refusing .*len"):
        registry.register("one", len)
    with pytest.raises(ValueError, match="widget 'one' is already registered"):
        registry.register("one")(len)
    assert registry["one"] is first_entry and list(registry) == ["one"]


def test_get_resolves_a_name_or_an_import_path_and_names_the_choices_otherwise():
    registry = Registry("widget")
    registry.register("one")(first_entry)
    assert registry.get("one") is first_entry
    assert registry.get(f"{__name__}:first_entry") is first_entry
    with pytest.raises(ValueError, match=r"unknown widget 'two'; known: one, or an import path"):
        registry.get("two")
    with pytest.raises(ValueError, match=r"widget 'tests.nowhere:x': cannot import module 'tests.nowhere'"):
        registry.get("tests.nowhere:x")


@pytest.mark.parametrize("path", REGISTRIES)
def test_every_real_registry_refuses_a_name_collision(path):
    registry = load(path)
    assert isinstance(registry, Registry), f"{path} is a {type(registry).__name__}, not a loongsage.registry.Registry"
    assert len(registry) >= 1
    name = next(iter(registry))
    entry = registry[name]
    with pytest.raises(ValueError, match=f"{name!r} is already registered"):
        registry.register(name, first_entry)
    assert registry[name] is entry  # the refused entry left the registered one in place
