"""Registry: a second entry under a taken name is refused, in the helper and in every real registry."""

from __future__ import annotations

import importlib
import sys

import pytest

from loongsage.registry import Registry

# Every registry this project keeps, as "module:NAME" (the tasks' data sources and rewards have their own tests).
REGISTRIES = [
    "loongsage.algorithms.staleness_windows:WINDOWS",
    "loongsage.agentflow.agents.registry:AGENTS",
    "loongsage.agentflow.sandbox:BACKENDS",
    "loongsage.agentflow.router.chat_format:CHAT_FORMATS",
    "loongsage.models.registry:MODELS",
    "loongsage.algorithms.advantages:ADVANTAGE_ESTIMATORS",
    "loongsage.algorithms.policy_losses:POLICY_LOSSES",
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


# A lazy entry: registered by import path, imported on its first lookup.


def write_module(tmp_path, monkeypatch, name: str, body: str) -> str:
    """A module `name` on sys.path, not imported yet."""
    (tmp_path / f"{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return name


def test_a_lazy_entry_is_imported_on_its_first_lookup_and_kept(tmp_path, monkeypatch):
    module = write_module(tmp_path, monkeypatch, "lazy_widget_a", "class Heavy:\n    pass\n")
    registry = Registry("widget")
    registry.register("light", first_entry)
    registry.register_lazy("heavy", f"{module}:Heavy")
    # naming, listing, counting and resolving another name import nothing
    assert "heavy" in registry and "missing" not in registry
    assert list(registry) == ["light", "heavy"] and len(registry) == 2
    assert registry.get("light") is first_entry
    with pytest.raises(ValueError, match=r"unknown widget 'nope'; known: heavy, light, or an import path"):
        registry.get("nope")
    assert module not in sys.modules

    heavy = registry.get("heavy")
    assert module in sys.modules and heavy is sys.modules[module].Heavy
    # kept: later lookups do not import again, even when the module could no longer be imported
    (tmp_path / f"{module}.py").unlink()
    del sys.modules[module]
    assert registry["heavy"] is heavy and registry.get("heavy") is heavy
    assert module not in sys.modules


def test_a_lazy_entry_takes_its_name_like_any_other(tmp_path, monkeypatch):
    module = write_module(tmp_path, monkeypatch, "lazy_widget_b", "class Heavy:\n    pass\n")
    registry = Registry("widget")
    registry.register("light", first_entry)
    with pytest.raises(ValueError, match=r"widget 'light' is already registered \(.*first_entry\); refusing lazy_widget_b:Heavy"):
        registry.register_lazy("light", f"{module}:Heavy")
    registry.register_lazy("heavy", f"{module}:Heavy")
    taken = r"widget 'heavy' is already registered \(lazy_widget_b:Heavy \(imported on first use\)\)"
    with pytest.raises(ValueError, match=taken):
        registry.register("heavy", first_entry)
    with pytest.raises(ValueError, match=r"widget 'heavy' is already registered"):
        registry.register_lazy("heavy", "elsewhere:Thing")
    assert module not in sys.modules  # refusing did not import it either
    assert registry["light"] is first_entry and registry["heavy"] is sys.modules[module].Heavy


def test_a_lazy_entry_that_cannot_be_imported_says_which_and_why(tmp_path, monkeypatch):
    broken = write_module(tmp_path, monkeypatch, "lazy_widget_broken", "raise RuntimeError('needs a GPU driver')\n")
    present = write_module(tmp_path, monkeypatch, "lazy_widget_c", "class Heavy:\n    pass\n")
    registry = Registry("widget")
    registry.register_lazy("missing", "lazy_widget_nowhere:Heavy")
    registry.register_lazy("broken", f"{broken}:Heavy")
    registry.register_lazy("typo", f"{present}:Heavvy")
    missing = r"widget 'missing': cannot import 'lazy_widget_nowhere:Heavy' \(ModuleNotFoundError: No module named"
    with pytest.raises(ValueError, match=missing + r" 'lazy_widget_nowhere'\)"):
        registry["missing"]
    broken_message = r"widget 'broken': cannot import 'lazy_widget_broken:Heavy' \(RuntimeError: needs a GPU driver\)"
    with pytest.raises(ValueError, match=broken_message):
        registry.get("broken")
    with pytest.raises(ValueError, match=r"widget 'typo': module 'lazy_widget_c' has no attribute 'Heavvy'"):
        registry.get("typo")
    assert "broken" in registry  # still registered: a later lookup tries again
    with pytest.raises(ValueError, match=r"widget 'half': 'lazy_widget_c' is not an import path 'package.module:attribute'"):
        registry.register_lazy("half", present)
    assert "half" not in registry
