"""The checker the contract tests rely on must itself tell a wrong shape from a right one."""

from __future__ import annotations

from tests.plugin_contracts.call_shapes import ANY, accepts, method_problems


class Worker:
    def __init__(self, path, seed=0):
        pass

    def step(self, samples, version=None):
        pass

    @staticmethod
    def describe(what):
        pass


def test_accepts_tells_fitting_calls_from_misfits():
    assert accepts(Worker, ANY) and accepts(Worker, ANY, seed=1)
    assert not accepts(Worker) and not accepts(Worker, ANY, ANY, ANY) and not accepts(Worker, ANY, rank=0)


def test_method_problems_names_missing_methods_and_refused_calls():
    assert method_problems(Worker, {"step": (ANY,), "describe": (ANY,)}) == []
    problems = method_problems(Worker, {"step": (ANY, ANY, ANY), "stop": (), "describe": ()})
    assert len(problems) == 3
    assert "Worker.step" in problems[0] and "refuses 3" in problems[0]
    assert problems[1] == "Worker has no method stop()"
    assert "Worker.describe" in problems[2]
