from __future__ import annotations

import os

import pytest

from loongsage.agentflow.sandbox import SandboxError
from loongsage.agentflow.sandbox.tree_files import check_relative_path, read_text, write_text


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "tree"
    root.mkdir()
    (root / "pkg").mkdir()
    (root / "pkg" / "mod.py").write_text("x = 1\n")
    return root


@pytest.fixture
def outside(tmp_path):
    target = tmp_path / "outside"
    target.mkdir()
    (target / "secret.txt").write_text("secret\n")
    return target


@pytest.mark.parametrize(
    "path, reason",
    [
        ("", "non-empty"),
        ("/etc/passwd", "relative"),
        ("../x", "'..'"),
        ("pkg/../../x", "'..'"),
        (".", "working tree itself"),
        ("a\0b", "non-empty string"),
    ],
)
def test_paths_that_escape_by_spelling_are_rejected(path, reason):
    with pytest.raises(SandboxError, match=reason):
        check_relative_path(path)


def test_read_and_write_inside_the_tree(tree):
    assert read_text(tree, "pkg/mod.py") == "x = 1\n"
    write_text(tree, "new/deep/file.txt", "héllo\n", owner=None)
    assert (tree / "new" / "deep" / "file.txt").read_text(encoding="utf-8") == "héllo\n"
    write_text(tree, "pkg/mod.py", "y", owner=None)
    assert read_text(tree, "./pkg/mod.py") == "y"


def test_symlink_inside_the_tree_is_followed(tree):
    os.symlink("pkg/mod.py", tree / "alias.py")
    assert read_text(tree, "alias.py") == "x = 1\n"


def test_symlinked_file_out_of_the_tree_is_neither_read_nor_written(tree, outside):
    os.symlink(outside / "secret.txt", tree / "notes.txt")
    with pytest.raises(SandboxError, match="'notes.txt' leads outside"):
        read_text(tree, "notes.txt")
    with pytest.raises(SandboxError, match="'notes.txt' leads outside"):
        write_text(tree, "notes.txt", "pwned", owner=None)
    assert (outside / "secret.txt").read_text() == "secret\n"


def test_symlinked_directory_out_of_the_tree_is_not_entered(tree, outside):
    os.symlink(outside, tree / "d")
    with pytest.raises(SandboxError, match="leads outside"):
        write_text(tree, "d/planted.txt", "pwned", owner=None)
    with pytest.raises(SandboxError, match="leads outside"):
        read_text(tree, "d/secret.txt")
    assert not (outside / "planted.txt").exists()


def test_dangling_relative_link_leaving_the_tree_is_rejected(tree):
    os.symlink("../../nowhere", tree / "dangling")
    with pytest.raises(SandboxError, match="leads outside"):
        write_text(tree, "dangling", "x", owner=None)


def test_missing_file_directory_and_fifo_get_clear_errors(tree):
    with pytest.raises(SandboxError, match="no file 'nope.txt'"):
        read_text(tree, "nope.txt")
    with pytest.raises(SandboxError, match="no file 'nope/x'"):
        read_text(tree, "nope/x")
    with pytest.raises(SandboxError, match="'pkg' is not a regular file"):
        read_text(tree, "pkg")
    os.mkfifo(tree / "pipe")
    with pytest.raises(SandboxError, match="'pipe'"):
        read_text(tree, "pipe")  # returns at once instead of blocking on the FIFO
    with pytest.raises(SandboxError, match="'pkg/mod.py/x'.*'mod.py' is a symlink or not a directory"):
        write_text(tree, "pkg/mod.py/x", "x", owner=None)


def test_non_string_content_is_rejected_naming_the_path(tree):
    with pytest.raises(SandboxError, match="'a.txt'.*must be str"):
        write_text(tree, "a.txt", b"bytes", owner=None)  # type: ignore[arg-type]


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_written_file_and_new_directories_belong_to_the_owner(tree):
    write_text(tree, "made/here.txt", "x", owner=4321)
    assert (tree / "made").stat().st_uid == 4321
    assert (tree / "made" / "here.txt").stat().st_uid == 4321
