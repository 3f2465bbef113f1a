"""Trajectory ids (and attempts) as URL path segments that no client or server rewrites.

Percent-encoding is not enough: Starlette (like most servers) decodes `%2F` back into `/`
before routing, and clients collapse `.` and `..` segments. So every byte outside
`[A-Za-z0-9_-]` of the id's UTF-8 is written as `~` and two hex digits (`owner/repo#12` ->
`owner~2Frepo~2312`): the segment holds only characters that URLs keep as they are, and
ordinary ids (`step3-g2-m1`) stay readable and unchanged.

Decoding takes any other character literally, so a hand-written `/trajectories/run.7` still
finds `run.7`; only a `~` must start an escape.

The admin routes (`GET` / `DELETE /trajectories/{id}`) also take an id the way people and HTTP
clients write one, percent-encoded (`owner%2Frepo%2312`, `%2E%2E`): the server decodes it, and
`readings` offers it as it came after the `~` reading.
"""

from __future__ import annotations

import re

from loongsage.agentflow.router.errors import RouterError, bad_request

_KEPT = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_ESCAPE = re.compile(r"~([0-9A-Fa-f]{2})?")


def encode_segment(text: str) -> str:
    if not text:
        raise ValueError("a trajectory id or attempt must not be empty: it would leave an empty URL segment")
    return "".join(chr(b) if b in _KEPT else f"~{b:02X}" for b in text.encode("utf-8", "surrogatepass"))


def decode_segment(segment: str, field: str) -> str:
    """The id `encode_segment` wrote; a 400 naming `field` for a malformed escape."""
    out, position = bytearray(), 0
    for match in _ESCAPE.finditer(segment):
        if match.group(1) is None:
            raise bad_request(
                f"{segment!r}: '~' at {match.start()} must start an escape ~XX (two hex digits of a UTF-8 byte)", field
            )
        out += segment[position : match.start()].encode("utf-8", "surrogatepass")
        out.append(int(match.group(1), 16))
        position = match.end()
    out += segment[position:].encode("utf-8", "surrogatepass")
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise bad_request(f"{segment!r} does not decode to UTF-8 text: {exc.reason}", field) from None


def readings(segment: str) -> list[str]:
    """The ids an admin route's (percent-decoded) `segment` may name, in the order they are
    looked up: `encode_segment`'s reading, when the segment is one, then the segment itself."""
    try:
        escaped = decode_segment(segment, "trajectory_id")
    except RouterError:
        return [segment]
    return [escaped] if escaped == segment else [escaped, segment]
