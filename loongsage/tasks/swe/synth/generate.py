"""Synthesized SWE tasks, SWE-smith style: a small module of template functions with one
injected bug, tests whose expected values come from running the correct code, and an issue
that reports one wrong result the way a user would.

Tasks are a pure function of (seed, index), so a training set, a warm-start set and a held-out
set are disjoint index ranges of one generator.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from loongsage.tasks.swe.instance import SweTask
from loongsage.tasks.swe.suite.spec import Bug, SuiteTask
from loongsage.tasks.swe.synth.templates import TEMPLATES, Function, Mutation

MODULES = ("pricing", "grades", "inventory", "helpers", "checks", "numbers", "textutil", "orders", "scores")


@dataclass(frozen=True)
class InjectedBug:
    function: Function
    mutation: Mutation

    @property
    def fixed_line(self) -> str:
        return self.function.lines[self.mutation.line]

    @property
    def buggy_line(self) -> str:
        return self.fixed_line.replace(self.mutation.fixed, self.mutation.buggy, 1)


def synth_task(seed: int, index: int, functions: int = 3) -> SweTask:
    rng = random.Random(f"loongsage-swe-synth:{seed}:{index}")
    chosen = [template(rng) for template in rng.sample(TEMPLATES, functions)]
    module = rng.choice(MODULES)
    module_text = f'"""{module.capitalize()} helpers."""\n\n\n' + "\n\n".join(f.source for f in chosen)
    bug = _choose_bug(rng, chosen, module_text)
    results = {f.name: [_call(f.source, f.name, args) for args in f.inputs] for f in chosen}
    broken = [_call(_buggy_source(bug), bug.function.name, args) for args in bug.function.inputs]
    test_path = f"tests/test_{module}.py"
    tests, fail_to_pass, pass_to_pass = [], [], []
    for function in chosen:
        for number, (args, expected) in enumerate(zip(function.inputs, results[function.name])):
            test_name = f"test_{function.name}_{number}"
            tests.append(f"def {test_name}():\n    assert {function.name}({_args(args)}) == {expected!r}\n")
            failing = function is bug.function and broken[number] != expected
            (fail_to_pass if failing else pass_to_pass).append(f"{test_path}::{test_name}")
    imports = ", ".join(sorted(f.name for f in chosen))
    suite_task = SuiteTask(
        instance_id=f"synth-{seed}-{index:05d}",
        difficulty="easy",
        problem_statement=_issue(bug, broken, results[bug.function.name]),
        files={f"{module}.py": module_text, test_path: f"from {module} import {imports}\n\n\n" + "\n\n".join(tests)},
        bugs=(Bug(f"{module}.py", bug.fixed_line, bug.buggy_line),),
        fail_to_pass=tuple(fail_to_pass),
        pass_to_pass=tuple(pass_to_pass),
    )
    return suite_task.to_task()


def _choose_bug(rng: random.Random, functions: list[Function], module_text: str) -> InjectedBug:
    """A mutation that changes at least one tested result, on a line that occurs once in the module."""
    candidates = [InjectedBug(f, m) for f in functions for m in f.mutations]
    rng.shuffle(candidates)
    for bug in candidates:
        if module_text.count(bug.fixed_line + "\n") != 1:
            continue
        expected = [_call(bug.function.source, bug.function.name, args) for args in bug.function.inputs]
        broken = [_call(_buggy_source(bug), bug.function.name, args) for args in bug.function.inputs]
        if expected != broken:
            return bug
    raise AssertionError(f"no mutation of {[f.name for f in functions]} changes a tested result")


def _buggy_source(bug: InjectedBug) -> str:
    lines = list(bug.function.lines)
    lines[bug.mutation.line] = bug.buggy_line
    return "\n".join(lines) + "\n"


def _call(source: str, name: str, args: tuple) -> Any:
    """The function's result, or the exception it raised (as its repr, so results compare)."""
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<{name}>", "exec"), namespace)  # noqa: S102 - our own template code
    try:
        return namespace[name](*args)
    except Exception as exc:  # a bug may make the function raise; the issue reports that
        return _Raised(f"{type(exc).__name__}: {exc}")


@dataclass(frozen=True)
class _Raised:
    message: str


def _issue(bug: InjectedBug, broken: list, expected: list) -> str:
    number = next(i for i, (b, e) in enumerate(zip(broken, expected)) if b != e)
    call = f"{bug.function.name}({_args(bug.function.inputs[number])})"
    got = broken[number]
    outcome = f"raises {got.message}" if isinstance(got, _Raised) else f"returns {got!r}"
    return f"`{call}` {outcome}, but it should return {expected[number]!r}.\n"


def _args(args: tuple) -> str:
    return ", ".join(repr(a) for a in args)
