"""The choices of a config key that the module implementing them keeps, named by import path
"package.module:NAME": a Registry (a registered name, or an import path "package.module:attribute"
that resolves; see loongsage.registry) or a tuple of names.

For owners above config in the package order (the engines, the trainer backends, the router's
export modes, the transports): config names them and looks them up when a config is first
checked, as the registries' entries are looked up, so that it imports nothing above it and pays
no import until a config is checked (the registries pull in torch and the backends, and the
backends import the config schema). Owners below config are imported as plain tuples.
"""

from __future__ import annotations

import importlib
from functools import cached_property

from loongsage.registry import Registry


class OwnedChoices:
    def __init__(self, owner_path: str):
        """`owner_path`: where the registry or the tuple of names lives, as "package.module:NAME"."""
        self.owner_path = owner_path

    @cached_property
    def choices(self) -> Registry | tuple[str, ...]:
        module, _, name = self.owner_path.partition(":")
        return getattr(importlib.import_module(module), name)

    def problems(self, key: str, value: str) -> list[str]:
        """[] when `value` is a choice; else one message naming `key`, the value and the choices."""
        return choice_problems(key, value, self.choices)


def choice_problems(key: str, value: str, choices) -> list[str]:
    if isinstance(choices, Registry):
        try:
            choices.get(value)
        except ValueError as exc:
            return [f"{key}={value!r}: {exc}"]
        return []
    if value not in choices:
        return [f"{key}={value!r} is not one of {', '.join(choices)}"]
    return []
