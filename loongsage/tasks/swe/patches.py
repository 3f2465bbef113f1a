"""What a unified diff touches, and which of those paths a fix may not change.

Paths are read as `git apply` (-p1) reads them: the first component (`a/`, `b/`) is
dropped. Grading also checks the tree after applying, so a header this parser misreads
cannot smuggle a test edit through.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable

# Files whose edit changes what the tests check or how pytest runs them.
_CONFIG_NAMES = frozenset({"conftest.py", "pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml"})
_TEST_NAME_PATTERNS = ("test_*.py", "*_test.py", "tests.py")
_TEST_DIRS = frozenset({"tests", "test"})

_DIFF_GIT = re.compile(r"^diff --git (?P<rest>.+)$")
_RENAME_OR_COPY = re.compile(r"^(?:rename|copy) (?:from|to) (?P<path>.+)$")
# git C-quotes unusual names: backslash escapes, and octal bytes for non-ASCII (é as \303\251).
_ESCAPE = re.compile(rb"\\([0-7]{3}|.)", re.DOTALL)
_ESCAPED_CHARS = {
    b'"': b'"',
    b"\\": b"\\",
    b"t": b"\t",
    b"n": b"\n",
    b"a": b"\a",
    b"b": b"\b",
    b"f": b"\f",
    b"r": b"\r",
    b"v": b"\v",
}


def touched_paths(patch: str) -> list[str]:
    """Every repository path the diff creates, changes, deletes, or renames from or to,
    in order of first mention, without duplicates."""
    lines = patch.splitlines()
    found: list[str] = []
    for index, line in enumerate(lines):
        found.extend(_paths_in_header(lines, index, line))
    return list(dict.fromkeys(path for path in found if path))


def is_protected_path(path: str) -> bool:
    """True for tests (a `tests/` or `test/` directory, test_*.py, *_test.py, tests.py),
    conftest.py and pytest/tox/setuptools configuration, at any depth."""
    *directories, name = path.split("/")
    return (
        name in _CONFIG_NAMES
        or any(fnmatch.fnmatchcase(name, pattern) for pattern in _TEST_NAME_PATTERNS)
        or any(directory in _TEST_DIRS for directory in directories)
    )


def forbidden_paths(patch: str, also_protected: Iterable[str] = ()) -> list[str]:
    """The paths the patch touches that a fix may not: `is_protected_path` ones and any in
    `also_protected` (e.g. the test files a task's node ids name)."""
    extra = set(also_protected)
    return [path for path in touched_paths(patch) if is_protected_path(path) or path in extra]


def node_id_file(node_id: str) -> str:
    """ "tests/test_x.py::TestA::test_b[1]" -> "tests/test_x.py"."""
    return node_id.split("::", 1)[0]


def _paths_in_header(lines: list[str], index: int, line: str) -> list[str]:
    if line.startswith("--- ") and _is_file_header(lines, index):
        return [_strip_prefix(_header_path(line[4:])), _strip_prefix(_header_path(lines[index + 1][4:]))]
    match = _RENAME_OR_COPY.match(line)
    if match:
        # Rename and copy lines carry the path without the a/ b/ prefix.
        return [_header_path(match["path"])]
    match = _DIFF_GIT.match(line)
    if match:
        return [_strip_prefix(path) for path in _diff_git_paths(match["rest"])]
    return []


def _is_file_header(lines: list[str], index: int) -> bool:
    # "--- x" / "+++ y" followed by a hunk: a removed line that starts with "-- " cannot
    # be mistaken for it unless the next two lines also look like a header.
    return index + 2 < len(lines) and lines[index + 1].startswith("+++ ") and lines[index + 2].startswith("@@")


def _header_path(text: str) -> str:
    """The path in a ---/+++ or rename line: C-quoted names unquoted, a trailing
    tab-separated timestamp dropped, /dev/null as ""."""
    if text.startswith('"'):
        end = _closing_quote(text)
        return _unquote(text[: end + 1]) if end > 0 else text
    path = text.split("\t", 1)[0].rstrip()
    return "" if path == "/dev/null" else path


def _diff_git_paths(rest: str) -> list[str]:
    if rest.startswith('"'):
        end = _closing_quote(rest)
        first = _unquote(rest[: end + 1])
        second = rest[end + 1 :].strip()
        return [first, _unquote(second) if second.startswith('"') else second]
    # Unquoted names may contain spaces; when both names are equal (the usual case) the
    # line is "a/P b/P", so split it in the middle.
    middle = len(rest) // 2
    if len(rest) % 2 == 1 and rest[middle] == " " and rest[:middle][2:] == rest[middle + 1 :][2:]:
        return [rest[:middle], rest[middle + 1 :]]
    first, separator, second = rest.rpartition(" b/")
    return [first, "b/" + second] if separator else [rest]


def _closing_quote(text: str) -> int:
    index = 1
    while index < len(text):
        if text[index] == "\\":
            index += 2
            continue
        if text[index] == '"':
            return index
        index += 1
    return -1


def _unquote(quoted: str) -> str:
    def decode(match: re.Match[bytes]) -> bytes:
        code = match[1]
        return bytes([int(code, 8)]) if len(code) == 3 else _ESCAPED_CHARS.get(code, code)

    return _ESCAPE.sub(decode, quoted[1:-1].encode("utf-8")).decode("utf-8", errors="replace")


def _strip_prefix(path: str) -> str:
    """Drop the first component as `git apply -p1` does (a bare name is kept, so that
    it is still classified)."""
    return path.split("/", 1)[1] if "/" in path else path
