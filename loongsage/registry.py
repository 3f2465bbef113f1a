"""Extension points by name: a registry entry, or any object reached by import path
("package.module:attribute"), so users extend the framework without editing it."""
from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def resolve(registry: Mapping[str, Callable[..., Any]], name_or_path: str, kind: str) -> Callable[..., Any]:
    """The registered entry `name_or_path`, else the object at "module:attribute".
    `kind` ("reward function", ...) only words the error messages."""
    if name_or_path in registry:
        return registry[name_or_path]
    if ":" not in name_or_path:
        raise ValueError(
            f"unknown {kind} {name_or_path!r}; known: {', '.join(sorted(registry))}, "
            f"or an import path 'package.module:attribute'"
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
