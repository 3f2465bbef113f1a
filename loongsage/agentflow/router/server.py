"""The router on its own thread (uvicorn)."""
from __future__ import annotations

from urllib.parse import quote

from loongsage.agentflow.router.app import build_app
from loongsage.agentflow.router.service import Router
from loongsage.http_server import AppServer


class RouterServer(AppServer):
    """`url_for(id, attempt)` is the OpenAI `base_url` to hand one trajectory's agent."""

    def __init__(self, router: Router):
        super().__init__(build_app(router), router.cfg.host, router.cfg.port, name="agentflow-router")
        self.router = router

    def url_for(self, trajectory_id: str, attempt: int | str = 0) -> str:
        return f"{self.base_url}/{quote(str(trajectory_id), safe='')}/{quote(str(attempt), safe='')}/v1"
