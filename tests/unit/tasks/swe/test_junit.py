from __future__ import annotations

import pytest

from loongsage.tasks.swe.junit import outcomes_from_junit

# Shaped as pytest 9 writes it (--junitxml, default xunit2 family), for a run with a
# failure, parametrized tests, a class, an xfail, a skip and a module that failed to import.
REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites name="pytest tests"><testsuite name="pytest" errors="1" failures="2" skipped="2" tests="10">
<testcase classname="tests.test_a" name="test_ok" time="0.001"/>
<testcase classname="tests.test_a" name="test_bad" time="0.001"><failure message="assert 0">E assert 0</failure></testcase>
<testcase classname="tests.test_a" name="test_p[1]" time="0.001"><failure message="assert 1 != 1"/></testcase>
<testcase classname="tests.test_a" name="test_p[a b]" time="0.001"/>
<testcase classname="tests.test_a" name="test_p[c::d]" time="0.001"/>
<testcase classname="tests.test_a.TestK" name="test_m" time="0.001"/>
<testcase classname="tests.test_a.TestK" name="test_n" time="0.001"/>
<testcase classname="tests.test_a" name="test_xf" time="0.001"><skipped type="pytest.xfail" message=""/></testcase>
<testcase classname="tests.test_a" name="test_sk" time="0.000"><skipped type="pytest.skip" message="skip"/></testcase>
<testcase classname="tests.sub.test_b" name="test_teardown" time="0.001"><error message="failed on teardown"/></testcase>
<testcase classname="" name="tests.test_c" time="0.000"><error message="collection failure">ImportError</error></testcase>
</testsuite></testsuites>
"""


@pytest.mark.parametrize(
    "node_id, outcome",
    [
        ("tests/test_a.py::test_ok", "passed"),
        ("tests/test_a.py::test_bad", "failed"),
        ("tests/test_a.py::test_p[a b]", "passed"),
        ("tests/test_a.py::test_p[c::d]", "passed"),
        ("tests/test_a.py::test_p[1]", "failed"),
        ("tests/test_a.py::test_p", "failed"),  # covers every parameter; the worst wins
        ("tests/test_a.py::TestK::test_m", "passed"),
        ("tests/test_a.py::TestK", "passed"),
        ("tests/test_a.py::test_xf", "passed"),  # an expected failure counts as passing, as in SWE-bench
        ("tests/test_a.py::test_sk", "skipped"),
        ("tests/sub/test_b.py::test_teardown", "error"),
        ("tests/test_c.py::test_anything", "error"),  # its module did not import
        ("tests/test_a.py::test_nope", "not found"),
        ("tests/test_a.py::test_o", "not found"),  # a prefix of a name is not that test
        ("tests/test_zzz.py::test_ok", "not found"),
    ],
)
def test_outcome_per_node_id(node_id, outcome):
    assert outcomes_from_junit(REPORT, [node_id]) == {node_id: outcome}


def test_not_xml_is_a_value_error():
    with pytest.raises(ValueError, match="not valid XML"):
        outcomes_from_junit("<testsuites><testcase", ["a::b"])
