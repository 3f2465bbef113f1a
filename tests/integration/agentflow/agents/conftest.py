"""What the tests of agent programs (OpenCode, Codex CLI, Claude Code) put behind them: the
router in front of a scripted engine (no tiny model emits a tool call on demand)."""

from __future__ import annotations

import pytest

from loongsage.models import load_tokenizer
from tests.integration.agentflow.router_support import start_router
from tests.standins.engine import StandinEngine


@pytest.fixture
def served(tiny_model_path, request):
    """(router, scripted engine, tokenizer to read what the engine was sent); the engine's context
    is SmolLM2's unless the test asks for more (indirect parameter)."""
    tokenizer = load_tokenizer(tiny_model_path)
    engine = StandinEngine(tokenizer, max_context=getattr(request, "param", 8192))
    router = start_router(engine.url, tiny_model_path, tokenizer)
    yield router, engine, tokenizer
    router.stop()
    engine.stop()
