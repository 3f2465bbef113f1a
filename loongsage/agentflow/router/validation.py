"""Typed reads of request JSON that name the offending field (`messages[2].content`) on error.

The body itself (size, nesting, unencodable text, over-long integer literals) was checked when
it was read (`loongsage.json_input`); what is left is each field's type and range.
"""

from __future__ import annotations

from typing import Any

from loongsage.agentflow.router.errors import RouterError, bad_request
from loongsage.json_input import join_path as join

_JSON_TYPE_NAMES = {dict: "an object", list: "an array", str: "a string", int: "an integer", float: "a number", bool: "a boolean"}
# Integer ranges the engines can hold: SGLang keeps top_k in int32 tensors, seeds are int64.
INT32_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_SHOWN_DIGITS = 40  # a 4000-digit number is cut short in messages


def expect(value: Any, kinds: type | tuple[type, ...], path: str) -> Any:
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    # JSON true is a Python int; a boolean never passes as a number.
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        wanted = " or ".join(_JSON_TYPE_NAMES.get(k, k.__name__) for k in kinds)
        raise bad_request(f"{path} must be {wanted}, got {_json_type(value)}", path)
    return value


def get(obj: dict, name: str, kinds: type | tuple[type, ...], path: str = "", required: bool = False) -> Any:
    """`obj[name]` checked against `kinds`; None when absent or null and not required."""
    value = obj.get(name)
    field = join(path, name)
    if value is None:
        if required:
            raise bad_request(f"{field} is required", field)
        return None
    return expect(value, (float, int) if kinds is float else kinds, field)


def in_range(value, low, high, field: str, low_open: bool = False):
    if value is not None and not ((low < value if low_open else low <= value) and (high is None or value <= high)):
        bounds = f"{'(' if low_open else '['}{low}, {high if high is not None else 'inf'}]"
        raise bad_request(f"{field}={_show(value)} must be in {bounds}", field)
    return value


def _show(value) -> str:
    text = str(value)
    return text if len(text) <= _SHOWN_DIGITS else f"{text[:_SHOWN_DIGITS]}... ({len(text)} characters)"


def json_object_body(body: Any) -> dict:
    if not isinstance(body, dict):
        raise bad_request(f"request body must be a JSON object, got {_json_type(body)}", "body")
    return body


def check_model(body: dict, model_names: tuple[str, ...]) -> str:
    model = get(body, "model", str, required=True)
    if model not in model_names:
        raise RouterError(404, f"model {model!r} not found; this router serves {', '.join(map(repr, model_names))}", "model")
    return model


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return _JSON_TYPE_NAMES.get(type(value), type(value).__name__)
