"""The endpoints of a route plan as the mesh names them: trainer ranks are sources, engines are
named by their place in the list of engine URLs and reached at their URL."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlparse

from loongsage.transfer.routes import Endpoint


def source_name(rank: int) -> str:
    """A trainer rank as a source of the plan."""
    return f"trainer/{rank}"


SOURCE = source_name(0)  # the one source of a push from a single process


def engine_endpoints(engine_urls: Sequence[str], engine_gpus: Sequence[Sequence[int]] | None = None) -> list[Endpoint]:
    """Engine i serves at `engine_urls[i]` on that URL's host, holding `engine_gpus[i]` (none given: no GPU)."""
    return [
        Endpoint(f"engine/{i}", "engine", urlparse(url).hostname or "", tuple(engine_gpus[i]) if engine_gpus else (), url)
        for i, url in enumerate(engine_urls)
    ]
