"""Extension points by name: a registry entry, or any object reached by import path
("package.module:attribute"), so users extend the framework without editing it.

Every extension point is one `Registry`; a second entry under a taken name is refused,
because the later import silently winning is how a plugin ends up never being called.
An entry whose module is slow to import (megatron-core: seconds) is registered by its import
path (`register_lazy`) and imported on first lookup, so only the runs that use it pay.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class _Lazy:
    """A registered name whose entry is still the import path "package.module:attribute"."""

    def __init__(self, path: str):
        self.path = path

    def __repr__(self) -> str:
        return f"{self.path} (imported on first use)"


class Registry(Mapping[str, T], Generic[T]):
    """Named entries of one kind ("reward", "staleness window", ...); `kind` words the errors."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, T | _Lazy] = {}

    def register(self, name: str, entry: T | None = None):
        """`registry.register("name", obj)`, or `@registry.register("name")` as a decorator."""
        if entry is None:

            def decorate(obj: T) -> T:
                self.register(name, obj)
                return obj

            return decorate
        self._refuse_taken(name, entry)
        self._entries[name] = entry
        return entry

    def register_lazy(self, name: str, path: str) -> None:
        """`name` stands for the object at `path` ("package.module:attribute"), imported on the first
        lookup and kept; iterating and `in` see the name without importing anything. A failed import
        is a ValueError at that lookup, naming the kind, the name and the import error."""
        module, _, attribute = path.partition(":")
        if not module or not attribute:
            raise ValueError(f"{self.kind} {name!r}: {path!r} is not an import path 'package.module:attribute'")
        lazy = _Lazy(path)
        self._refuse_taken(name, lazy)
        self._entries[name] = lazy

    def _refuse_taken(self, name: str, entry: Any) -> None:
        if name in self._entries:
            raise ValueError(
                f"{self.kind} {name!r} is already registered ({_where(self._entries[name])}); "
                f"refusing {_where(entry)} under the same name"
            )

    def get(self, name_or_path: str) -> T:  # type: ignore[override]
        """The entry by name, else the object at "module:attribute"; ValueError naming the choices."""
        return resolve(self, name_or_path, self.kind)

    def __getitem__(self, name: str) -> T:
        entry = self._entries[name]
        if isinstance(entry, _Lazy):
            entry = self._entries[name] = self._import(name, entry.path)
        return entry

    def __contains__(self, name: object) -> bool:  # Mapping's would look the entry up, importing a lazy one
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def _import(self, name: str, path: str) -> T:
        module_name, _, attribute = path.partition(":")
        try:
            target: Any = importlib.import_module(module_name)
        except Exception as exc:  # not only ImportError: a module may fail in its own top-level code
            raise ValueError(f"{self.kind} {name!r}: cannot import {path!r} ({type(exc).__name__}: {exc})") from exc
        for part in attribute.split("."):
            if not hasattr(target, part):
                raise ValueError(f"{self.kind} {name!r}: module {module_name!r} has no attribute {attribute!r} ({path!r})")
            target = getattr(target, part)
        return target


def _where(obj: Any) -> str:
    if isinstance(obj, _Lazy):
        return repr(obj)
    module, name = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    return f"{module}.{name}" if module and name else repr(obj)


def resolve(registry: Mapping[str, Callable[..., Any]], name_or_path: str, kind: str) -> Callable[..., Any]:
    """The registered entry `name_or_path`, else the object at "module:attribute".
    `kind` ("reward function", ...) only words the error messages."""
    if name_or_path in registry:
        return registry[name_or_path]
    if ":" not in name_or_path:
        raise ValueError(
            f"unknown {kind} {name_or_path!r}; known: {', '.join(sorted(registry))}, or an import path 'package.module:attribute'"
        )
    module_name, _, attribute = name_or_path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"{kind} {name_or_path!r}: cannot import module {module_name!r} ({exc})") from exc
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ValueError(f"{kind} {name_or_path!r}: module {module_name!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f"{kind} {name_or_path!r} is a {type(target).__name__}, not callable")
    return target
