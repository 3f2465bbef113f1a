"""The AgentFlow router: OpenAI/Anthropic-compatible HTTP in front of the engines, keeping the
ids of every turn (token in, token out) per trajectory.

    from loongsage.agentflow.router.server import RouterServer

    router = Router(RouterConfig(model="tiny", engine_urls=(engine_url,),
                                 sampling=SamplingDefaults(temperature=1.0, top_p=1.0, top_k=-1, max_new_tokens=128)))
    server = RouterServer(router); server.start()
    base_url = server.url_for("traj-7", attempt=0)   # hand to the agent with router.api_key
    ...
    samples = to_samples(router.store.pop("traj-7"))

The HTTP server (FastAPI) is imported from its own module: config checks the export modes here,
and would import a web framework to do it.
"""

from loongsage.agentflow.router.chat_format import CHAT_FORMATS, HermesFormat, get_chat_format
from loongsage.agentflow.router.config import RouterConfig
from loongsage.agentflow.router.export import to_samples, trajectory_json
from loongsage.agentflow.router.service import Router
from loongsage.agentflow.router.store import TrajectoryStore
from loongsage.agentflow.router.trajectory import Branch, Trajectory, Turn
from loongsage.sampling import SamplingDefaults

__all__ = [
    "CHAT_FORMATS",
    "Branch",
    "HermesFormat",
    "Router",
    "RouterConfig",
    "SamplingDefaults",
    "Trajectory",
    "TrajectoryStore",
    "Turn",
    "get_chat_format",
    "to_samples",
    "trajectory_json",
]
