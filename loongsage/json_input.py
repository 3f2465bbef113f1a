"""JSON request bodies from untrusted clients, read so that no input can turn into a 5xx.

Python's `json` fails in ways a server must not pass on as a crash: nesting deeper than the
interpreter's recursion limit raises RecursionError (and nesting just below it parses, then
breaks whatever walks or re-serialises the value later); an integer literal longer than
`sys.get_int_max_str_digits()` raises a plain ValueError; a lone UTF-16 surrogate ("\\ud800")
parses into a `str` that can never be encoded again (tokenizer, response, log). Each of those
becomes a `JsonInputError` naming where in the body it sits (`messages[2].content`), which
the router and the engine answer with 400 (413 for a body over the size limit).

NaN, Infinity and huge finite numbers do parse (Python's clients send `NaN` for float('nan')):
the field checks of each layer refuse them where they matter, naming the field.
"""

from __future__ import annotations

import itertools
import json
import re
import sys
from typing import Any

MAX_DEPTH = 64  # containers inside containers: JSON schemas of tools nest ~10; nobody needs 64
# Bodies nested deeper than this are refused from a scan of the bytes, before `json.loads` recurses.
_SCAN_REFUSES_DEPTH = 256
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(rb"[\[\]{}]")
_DEPTH_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
_PLAIN_NUMBERS = frozenset({int, float})
_ALL_BUT_OPENERS = bytes(b for b in range(256) if b not in b"[{")


class JsonInputError(ValueError):
    def __init__(self, message: str, field: str, status: int = 400):
        super().__init__(f"{field}: {message}" if field and not message.startswith(field) else message)
        self.message, self.field, self.status = str(self), field, status


def join_path(path: str, name: str | int) -> str:
    """`messages` + 2 -> `messages[2]`; `messages[2]` + `content` -> `messages[2].content`."""
    if isinstance(name, int):
        return f"{path}[{name}]"
    return f"{path}.{name}" if path else name


async def read_json(request, limit: int, max_depth: int = MAX_DEPTH) -> Any:
    """The body of a Starlette request, at most `limit` bytes, parsed and checked by `parse_json`."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(int(declared), limit)
    chunks, size = [], 0
    async for chunk in request.stream():  # a chunked body has no content-length to trust
        size += len(chunk)
        if size > limit:
            raise _too_large(size, limit)
        chunks.append(chunk)
    return parse_json(b"".join(chunks), max_depth)


def parse_json(data: bytes | str, max_depth: int = MAX_DEPTH) -> Any:
    """`json.loads(data)`, or a JsonInputError for invalid JSON, nesting deeper than `max_depth`,
    an integer literal too long to convert, or a string that is not valid Unicode."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if _nesting(raw) > _SCAN_REFUSES_DEPTH:
        raise JsonInputError(f"JSON nested deeper than {max_depth} levels", "body")
    try:
        value = json.loads(data)
    except RecursionError:  # cannot happen after the scan; kept as the last guard against a 500
        raise JsonInputError(f"JSON nested deeper than {max_depth} levels", "body") from None
    except UnicodeDecodeError as exc:
        raise JsonInputError(f"request body is not valid UTF-8 JSON: {exc}", "body") from None
    except json.JSONDecodeError as exc:
        raise JsonInputError(f"request body is not valid JSON: {exc}", "body") from None
    except ValueError as exc:
        # The integer digit limit raises a bare ValueError: parse again keeping such literals
        # as markers, so the check below can say which field holds one.
        try:
            value = json.loads(data, parse_int=_int_or_marker)
        except ValueError:
            raise JsonInputError(f"request body cannot be parsed: {exc}", "body") from None
    check_tree(value, max_depth)
    return value


def check_tree(value: Any, max_depth: int = MAX_DEPTH, path: str = "") -> None:
    """Every string (keys too) encodable as UTF-8, no container deeper than `max_depth`, no
    over-long integer literal. Iterative, so it cannot itself run out of stack."""
    stack = [(value, path, 1)]
    while stack:
        item, where, depth = stack.pop()
        if isinstance(item, dict):
            if depth > max_depth:
                raise JsonInputError(f"JSON nested deeper than {max_depth} levels", where or "body")
            for key, child in item.items():
                _check_text(key, where or "body", is_key=True)
                # A megabyte key must not become a megabyte path at every level below it.
                stack.append((child, join_path(where, key if len(key) <= 64 else key[:64] + "..."), depth + 1))
        elif isinstance(item, list):
            if depth > max_depth:
                raise JsonInputError(f"JSON nested deeper than {max_depth} levels", where or "body")
            if set(map(type, item)) <= _PLAIN_NUMBERS:  # token id lists: no walk in Python
                continue
            stack.extend(
                (child, join_path(where, i), depth + 1) for i, child in enumerate(item) if type(child) not in _PLAIN_NUMBERS
            )
        elif isinstance(item, str):
            _check_text(item, where or "body")
        elif isinstance(item, _LongInt):
            raise JsonInputError(
                f"integer literal of {item.digits} digits is too long (at most {sys.get_int_max_str_digits()})", where or "body"
            )


def _check_text(text: str, field: str, is_key: bool = False) -> None:
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        what = f"key {text[:20]!r}{'...' if len(text) > 20 else ''}" if is_key else "text"
        raise JsonInputError(
            f"{what} holds {text[exc.start]!r} at position {exc.start}, a lone UTF-16 surrogate that cannot be encoded", field
        ) from None


def _nesting(raw: bytes) -> int:
    """The deepest bracket nesting outside strings; cheap when the body has few brackets."""
    if len(raw.translate(None, _ALL_BUT_OPENERS)) <= _SCAN_REFUSES_DEPTH:  # one C pass, ~2 ns/byte
        return 0
    brackets = _BRACKET.findall(_STRING.sub(b"", raw))
    return max(itertools.accumulate(_DEPTH_STEP[b[0]] for b in brackets), default=0)


class _LongInt:
    def __init__(self, digits: int):
        self.digits = digits


def _int_or_marker(literal: str):
    digits = len(literal.lstrip("-"))
    return _LongInt(digits) if digits > sys.get_int_max_str_digits() else int(literal)


def _too_large(size: int, limit: int) -> JsonInputError:
    return JsonInputError(f"request body of at least {size} bytes exceeds the limit of {limit} bytes", "body", 413)
