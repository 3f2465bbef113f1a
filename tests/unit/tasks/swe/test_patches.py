from __future__ import annotations

import pytest

from loongsage.tasks.swe.patches import forbidden_paths, is_protected_path, node_id_file, touched_paths

# As `git diff` prints them: a change, a new file, a deletion, a rename, a quoted name.
GIT_DIFF = """\
diff --git a/pkg/mod.py b/pkg/mod.py
index 1111111..2222222 100644
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -1,2 +1,2 @@
-x = 1
+x = 2
 y = 3
diff --git a/pkg/new file.py b/pkg/new file.py
new file mode 100644
index 0000000..3333333
--- /dev/null
+++ b/pkg/new file.py
@@ -0,0 +1 @@
+z = 1
diff --git a/old.py b/old.py
deleted file mode 100644
index 4444444..0000000
--- a/old.py
+++ /dev/null
@@ -1 +0,0 @@
-gone = True
diff --git a/tests/test_a.py b/pkg/moved.py
similarity index 100%
rename from tests/test_a.py
rename to pkg/moved.py
diff --git "a/caf\\303\\251/\\"q\\".py" "b/caf\\303\\251/\\"q\\".py"
index 5555555..6666666 100644
--- "a/caf\\303\\251/\\"q\\".py"
+++ "b/caf\\303\\251/\\"q\\".py"
@@ -1 +1 @@
-a
+b
"""


def test_touched_paths_of_a_git_diff():
    assert touched_paths(GIT_DIFF) == [
        "pkg/mod.py",
        "pkg/new file.py",
        "old.py",
        "tests/test_a.py",
        "pkg/moved.py",
        'café/"q".py',
    ]


def test_traditional_diff_with_timestamps_and_binary_only_section():
    patch = (
        "--- a/src/util.py\t2024-01-01 10:00:00\n"
        "+++ b/src/util.py\t2024-01-02 10:00:00\n"
        "@@ -1 +1 @@\n-a\n+b\n"
        "diff --git a/conftest.py b/conftest.py\n"
        "new file mode 100644\n"
        "Binary files /dev/null and b/conftest.py differ\n"
    )
    assert touched_paths(patch) == ["src/util.py", "conftest.py"]


def test_removed_line_that_looks_like_a_header_is_not_a_path():
    patch = "--- a/sql.py\n+++ b/sql.py\n@@ -1,2 +1,2 @@\n--- old comment\n+++ new comment\n context\n"
    assert touched_paths(patch) == ["sql.py"]


def test_empty_or_garbage_patch_touches_nothing():
    assert touched_paths("") == []
    assert touched_paths("I fixed it by changing the loop.\n") == []


@pytest.mark.parametrize(
    "path",
    [
        "tests/test_mod.py",
        "tests/helpers.py",
        "pkg/tests/data.json",
        "test/x.py",
        "test_mod.py",
        "pkg/mod_test.py",
        "app/tests.py",
        "conftest.py",
        "pkg/conftest.py",
        "pytest.ini",
        ".pytest.ini",
        "tox.ini",
        "setup.cfg",
        "pyproject.toml",
        "sub/pyproject.toml",
    ],
)
def test_protected_paths(path):
    assert is_protected_path(path)


@pytest.mark.parametrize(
    "path", ["pkg/mod.py", "testing.py", "pkg/testutils.py", "contest.py", "latest/mod.py", "setup.py", "README.md"]
)
def test_source_paths_are_not_protected(path):
    assert not is_protected_path(path)


def test_forbidden_paths_include_extra_protected_files():
    assert forbidden_paths(GIT_DIFF) == ["tests/test_a.py"]
    assert forbidden_paths(GIT_DIFF, also_protected={"old.py"}) == ["old.py", "tests/test_a.py"]


def test_node_id_file():
    assert node_id_file("tests/test_x.py::TestA::test_b[a::b]") == "tests/test_x.py"
    assert node_id_file("tests/test_x.py") == "tests/test_x.py"
