"""The one error type of the router: an HTTP status, a message, and the field it is about."""

from __future__ import annotations


class RouterError(Exception):
    """Raised anywhere in request handling; the app turns it into an OpenAI- or Anthropic-style
    error body. `param` names the offending field (`messages[2].role`) when there is one."""

    def __init__(self, status: int, message: str, param: str | None = None, kind: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.kind = kind or _default_kind(status)


def bad_request(message: str, param: str | None = None) -> RouterError:
    """A 400 whose message starts with the field it is about, unless it names it already."""
    if param and param not in message:
        message = f"{param}: {message}"
    return RouterError(400, message, param)


def _default_kind(status: int) -> str:
    return {
        401: "authentication_error",
        404: "not_found_error",
        413: "request_too_large",
        502: "api_error",
        503: "overloaded_error",
    }.get(status, "invalid_request_error")
