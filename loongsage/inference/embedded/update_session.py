"""SGLang 0.5.23's weight-update session: /update_weights_from_tensor and
/update_weights_from_distributed are refused outside `/begin_weight_update` ...
`/end_weight_update`, so that callers tested here make the calls SGLang needs.

One session per server, as in SGLang: a second begin, or an end without one, is refused. The
refusals are SGLang's own answer, HTTP 400 `{"success": false, "message"}` (not this engine's
`{"error": {...}}`), with SGLang's messages. The selector ("target", "draft", "all") is kept for
/get_server_info only: this engine has one model and no draft, which every selector updates.
"""

from __future__ import annotations

import threading

from loongsage.inference.embedded.protocol import BadRequest

SELECTORS = ("target", "draft", "all")


class SessionRefused(RuntimeError):
    """Answered as SGLang answers it: HTTP 400, {"success": false, "message"}."""


class UpdateSession:
    def __init__(self):
        self.selector: str | None = None  # the open session's, None when closed
        self._lock = threading.Lock()

    def begin(self, body) -> dict:
        if not isinstance(body, dict):
            raise BadRequest("request body must be a JSON object", "body")
        selector = body.get("selector", "all")
        if selector not in SELECTORS:
            raise BadRequest(f"expected one of {', '.join(SELECTORS)}, got {selector!r}", "selector")
        with self._lock:
            if self.selector is not None:
                raise SessionRefused("a weight-update session is already open; call end_weight_update() first")
            self.selector = selector
        return {"success": True, "message": "Success"}

    def end(self, body) -> dict:
        if not isinstance(body, dict):
            raise BadRequest("request body must be a JSON object", "body")
        with self._lock:
            if self.selector is None:
                raise SessionRefused("no weight-update session is open; call begin_weight_update() first")
            self.selector = None
        return {"success": True, "message": "Success"}

    def require(self, endpoint: str) -> None:
        """Raises SessionRefused outside a session; `endpoint` is named as SGLang names it."""
        if self.selector is None:
            raise SessionRefused(f"{endpoint} must run between begin_weight_update() and end_weight_update()")
