"""Every agent factory is called by build_agent with the config's agent options as keywords
(possibly none), and makes something the episode runner calls as `agent.run(task, endpoint)`."""

from __future__ import annotations

import inspect
import typing

import pytest

from loongsage.agentflow.agents.registry import AGENTS
from tests.plugin_contracts.call_shapes import ANY, accepts, method_problems


def made_type(factory) -> type:
    """What the factory makes: a class makes itself; a function says so in its return annotation."""
    if isinstance(factory, type):
        return factory
    made = typing.get_type_hints(factory).get("return")
    assert isinstance(made, type), f"{factory.__qualname__} does not annotate the agent class it returns"
    return made


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_factory_takes_options_as_keywords_only(name):
    factory = AGENTS[name]
    assert accepts(factory), f"{name}: a parameter without a default (agent options may be empty)"
    positional_only = [
        p.name for p in inspect.signature(factory).parameters.values() if p.kind is inspect.Parameter.POSITIONAL_ONLY
    ]
    assert positional_only == [], f"{name}: options arrive as keywords; {positional_only} cannot be set"


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_what_the_factory_makes_runs_a_task_at_an_endpoint(name):
    assert method_problems(made_type(AGENTS[name]), {"run": (ANY, ANY)}) == []
