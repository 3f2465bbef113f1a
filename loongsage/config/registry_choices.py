"""The choices of a config key that names a registry entry: a registered name, or an import
path "package.module:attribute" that resolves (see loongsage.registry).

The registry is imported when a config is first checked, not with the config package: the
registries pull in torch and the backends, and the backends import the config schema.
"""

from __future__ import annotations

import importlib
from functools import cached_property

from loongsage.registry import Registry


class RegistryChoices:
    def __init__(self, registry_path: str):
        """`registry_path`: where the Registry lives, as "package.module:NAME"."""
        self.registry_path = registry_path

    @cached_property
    def registry(self) -> Registry:
        module, _, name = self.registry_path.partition(":")
        return getattr(importlib.import_module(module), name)

    def problems(self, key: str, value: str) -> list[str]:
        """[] when `value` resolves; else one message naming `key`, the value and the registered names."""
        try:
            self.registry.get(value)
        except ValueError as exc:
            return [f"{key}={value!r}: {exc}"]
        return []
