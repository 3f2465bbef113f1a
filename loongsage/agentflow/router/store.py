"""Trajectories by id, shared between the router's event loop and the controller's thread."""

from __future__ import annotations

import threading

from loongsage.agentflow.router.trajectory import Trajectory


class TrajectoryStore:
    """The controller takes finished trajectories out with `pop(id)`. A request still in flight
    on a popped trajectory records its turn on the popped object, never on a new one."""

    def __init__(self):
        self._trajectories: dict[str, Trajectory] = {}
        self._lock = threading.Lock()

    def setdefault(self, trajectory_id: str, trajectory: Trajectory) -> Trajectory:
        """The stored trajectory of that id; `trajectory` itself when there was none."""
        with self._lock:
            return self._trajectories.setdefault(trajectory_id, trajectory)

    def get(self, trajectory_id: str) -> Trajectory | None:
        with self._lock:
            return self._trajectories.get(trajectory_id)

    def pop(self, trajectory_id: str) -> Trajectory | None:
        with self._lock:
            return self._trajectories.pop(trajectory_id, None)

    def ids(self) -> list[str]:
        with self._lock:
            return list(self._trajectories)

    def __len__(self) -> int:
        with self._lock:
            return len(self._trajectories)
