"""An embedded engine in a process of its own for the agentflow benchmarks, and the opening
message of each benchmark conversation."""

from __future__ import annotations

import multiprocessing
import threading

from loongsage.inference.embedded.engine import Engine
from loongsage.inference.embedded.server import EmbeddedServer

ENGINE_START_TIMEOUT_S = 300
TOPICS = ["the weather", "prime numbers", "a cat", "the moon", "rivers", "music", "bread", "trains"]


def opening_message(conversation: int) -> str:
    return f"Tell me about {TOPICS[conversation % len(TOPICS)]}."


def start_engine_process(model_path, engine_cfg: dict):
    """The engine in its own process, as deployments run it (a Ray actor or an SGLang server),
    so the engine's threads and the router's do not share one interpreter lock."""
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=_serve_engine, args=(str(model_path), engine_cfg, child), daemon=True)
    process.start()
    if not parent.poll(ENGINE_START_TIMEOUT_S):
        process.terminate()
        raise RuntimeError(f"the engine process did not start within {ENGINE_START_TIMEOUT_S} s")
    return process, parent.recv()


def _serve_engine(model_path: str, engine_cfg: dict, conn) -> None:
    server = EmbeddedServer(Engine(model_path, engine_cfg))
    conn.send(server.start())
    threading.Event().wait()  # until terminated
