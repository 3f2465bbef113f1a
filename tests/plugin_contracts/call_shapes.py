"""Does a registry entry accept the calls its registry's caller makes? Read from signatures
(`inspect.signature(...).bind`), so nothing is constructed, started or loaded."""

from __future__ import annotations

import inspect
from typing import Any

ANY = object()  # a placeholder argument: binding checks the call's shape, not its values


def accepts(fn: Any, *args: Any, **kwargs: Any) -> bool:
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        return False
    return True


def method_problems(cls: type, calls: dict[str, tuple]) -> list[str]:
    """What is wrong with `cls` for a caller making `calls` ({method: positional args}):
    each method missing, or refusing its call (self is supplied)."""
    problems = []
    for name, args in calls.items():
        static = inspect.getattr_static(cls, name, None)
        if static is None or not callable(getattr(cls, name)):
            problems.append(f"{cls.__qualname__} has no method {name}()")
            continue
        self_args = () if isinstance(static, (staticmethod, classmethod)) else (ANY,)
        if not accepts(getattr(cls, name), *self_args, *args):
            problems.append(
                f"{cls.__qualname__}.{name}{inspect.signature(getattr(cls, name))} refuses {len(args)} positional arguments"
            )
    return problems
