"""The router on its own thread (uvicorn)."""

from __future__ import annotations

from loongsage.agentflow.router.app import build_app
from loongsage.agentflow.router.ids import encode_segment
from loongsage.agentflow.router.service import Router
from loongsage.http_server import AppServer


class RouterServer(AppServer):
    """`url_for(id, attempt)` is the OpenAI `base_url` to hand one trajectory's agent, together
    with `router.key_for(id)`."""

    def __init__(self, router: Router):
        super().__init__(build_app(router), router.cfg.host, router.cfg.port, name="agentflow-router")
        self.router = router

    def url_for(self, trajectory_id: str, attempt: int | str = 0) -> str:
        return f"{self.base_url}/{encode_segment(str(trajectory_id))}/{encode_segment(str(attempt))}/v1"

    def trajectory_url(self, trajectory_id: str) -> str:
        """Where the admin key reads (GET) or drops (DELETE) a recorded trajectory."""
        return f"{self.base_url}/trajectories/{encode_segment(str(trajectory_id))}"
