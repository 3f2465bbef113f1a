"""A task's gold patch as the tool calls that make it: `str_replace` per changed block, then
`submit`. These are what a warm start imitates before RL (see the controller's warm_start)."""

from __future__ import annotations

from loongsage.tasks.swe.instance import SweTask

Hunk = list[str]  # the body lines of one @@ hunk, each starting with " ", "-" or "+"


def gold_tool_calls(task: SweTask) -> list[dict] | None:
    """[{name, arguments}, ...] that turn the task's files into the fixed tree, or None when the
    task carries no files (image tasks) or a change cannot be anchored uniquely."""
    if not task.files:
        return None
    contents = dict(task.files)
    calls = []
    for path, hunk in _hunks(task.gold_patch):
        if path not in contents:
            return None  # a new file: out of what str_replace does
        for before, removed, added, after in _changes(hunk):
            edit = _unique_edit(contents[path], before, removed, added, after)
            if edit is None:
                return None
            old, new = edit
            contents[path] = contents[path].replace(old, new, 1)
            calls.append({"name": "str_replace", "arguments": {"path": path, "old_str": old, "new_str": new}})
    return [*calls, {"name": "submit", "arguments": {}}]


def _hunks(patch: str) -> list[tuple[str, Hunk]]:
    hunks: list[tuple[str, Hunk]] = []
    path = None
    for line in patch.splitlines():
        if line.startswith("+++ "):
            path = line[4:].removeprefix("b/")
        elif line.startswith("@@") and path is not None:
            hunks.append((path, []))
        elif hunks and line[:1] in (" ", "-", "+") and not line.startswith(("--- ", "+++ ")):
            hunks[-1][1].append(line)
    return hunks


def _changes(hunk: Hunk) -> list[tuple[list[str], list[str], list[str], list[str]]]:
    """Each run of removed/added lines with the context lines around it."""
    changes = []
    index = 0
    while index < len(hunk):
        if hunk[index][0] == " ":
            index += 1
            continue
        start = index
        while index < len(hunk) and hunk[index][0] != " ":
            index += 1
        run = hunk[start:index]
        before = [line[1:] for line in hunk[:start] if line[0] == " "]
        after = [line[1:] for line in hunk[index:] if line[0] == " "]
        changes.append(
            (before, [line[1:] for line in run if line[0] == "-"], [line[1:] for line in run if line[0] == "+"], after)
        )
    return changes


def _unique_edit(
    content: str, before: list[str], removed: list[str], added: list[str], after: list[str]
) -> tuple[str, str] | None:
    """The smallest (old, new) around the change whose old text occurs once in the file."""
    for context in range(max(len(before), len(after)) + 1):
        head = before[len(before) - context :] if context else []
        tail = after[:context]
        old_lines, new_lines = head + removed + tail, head + added + tail
        if not old_lines or not "".join(old_lines).strip():
            continue
        old, new = "\n".join(old_lines), "\n".join(new_lines)
        # The first line's indentation is where the model's copy most often slips; a substring
        # match does not need it.
        indent = len(old) - len(old.lstrip(" "))
        if new.startswith(old[:indent]):
            old, new = old[indent:], new[indent:]
        if content.count(old) == 1:
            return old, new
    return None
