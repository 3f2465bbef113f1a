"""API keys: the run's admin key, and one key per trajectory derived from it.

An agent gets the key of its own trajectory only (`key_for(id)`): it can call the model under
its own URL, and nothing else: no other trajectory, no listing, no export, no delete. The
admin key (the controller's, the operator's) can do everything. Trajectory keys are an HMAC
of the id under the admin key, so they need no table, survive any number of episodes, and
cannot be guessed from another trajectory's key.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from loongsage.agentflow.router.errors import RouterError

_TRAJECTORY_KEY_PREFIX = "lst-"


class Keys:
    def __init__(self, admin_key: str):
        self.admin = admin_key
        self._secret = admin_key.encode()

    def for_trajectory(self, trajectory_id: str) -> str:
        digest = hmac.new(
            self._secret, b"loongsage-trajectory\0" + trajectory_id.encode("utf-8", "surrogatepass"), hashlib.sha256
        ).digest()
        return _TRAJECTORY_KEY_PREFIX + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    def check(self, given: str, trajectory_id: str | None = None) -> None:
        """Passes the admin key anywhere and a trajectory's key under its own trajectory (given
        as `trajectory_id`); a 401 saying what the route needs otherwise."""
        if _same(given, self.admin):
            return
        if trajectory_id is not None:
            if _same(given, self.for_trajectory(trajectory_id)):
                return
            raise RouterError(401, "invalid API key: a trajectory's key works only under that trajectory's own URL")
        raise RouterError(401, "invalid API key: this route needs the run's admin key")


def presented_key(headers) -> str:
    """The key a request carries, as `x-api-key` or `Authorization: Bearer`; 401 when none."""
    given = headers.get("x-api-key")
    authorization = headers.get("authorization", "")
    if given is None and authorization[:7].lower() == "bearer ":
        given = authorization[7:].strip()
    if given is None:
        raise RouterError(401, "missing API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'")
    return given


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode())
