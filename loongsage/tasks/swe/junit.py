"""Per-test outcomes from pytest's JUnit XML report, keyed by the node ids asked for.

The XML names a test by (classname, name) rather than by node id; pytest derives both
from the node id ("tests/test_a.py::TestK::test_m[1]" -> "tests.test_a.TestK",
"test_m[1]"), so we derive the same pair from each requested id and look it up. A node id
without parameters or naming a class covers every test under it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from xml.etree import ElementTree

PASSED = "passed"
FAILED = "failed"
ERROR = "error"
SKIPPED = "skipped"
NOT_FOUND = "not found"
# Worst first: a node id covering several tests takes the worst of their outcomes.
_SEVERITY = (FAILED, ERROR, SKIPPED, PASSED)


@dataclass(frozen=True)
class _Case:
    classname: str
    name: str
    outcome: str


def outcomes_from_junit(xml_text: str, node_ids: Iterable[str]) -> dict[str, str]:
    """{node id: passed | failed | error | skipped | not found}. An expected failure
    (xfail) counts as passed, as SWE-bench counts it. Raises ValueError for text that is
    not JUnit XML."""
    cases = _cases(xml_text)
    return {node_id: _outcome(node_id, cases) for node_id in node_ids}


def _cases(xml_text: str) -> list[_Case]:
    try:
        root = ElementTree.fromstring(xml_text)
    except ElementTree.ParseError as exc:
        raise ValueError(f"pytest's JUnit XML report is not valid XML ({exc})") from None
    return [_Case(case.get("classname", ""), case.get("name", ""), _case_outcome(case)) for case in root.iter("testcase")]


def _case_outcome(case: ElementTree.Element) -> str:
    if case.find("failure") is not None:
        return FAILED
    if case.find("error") is not None:
        return ERROR
    skipped = case.find("skipped")
    if skipped is not None:
        return PASSED if skipped.get("type") == "pytest.xfail" else SKIPPED
    return PASSED


def _outcome(node_id: str, cases: list[_Case]) -> str:
    names = _junit_address(node_id)
    covered = [case.outcome for case in cases if _covers(names, case)]
    if covered:
        return next(outcome for outcome in _SEVERITY if outcome in covered)
    # A module that failed to import is reported as one case named after the module.
    module_error = any(case.classname == "" and case.name == names[0] for case in cases)
    return ERROR if module_error else NOT_FOUND


def _junit_address(node_id: str) -> list[str]:
    # The same mangling as pytest's junitxml.mangle_test_address.
    path, bracket, params = node_id.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    return names


def _covers(names: list[str], case: _Case) -> bool:
    container = ".".join(names)
    if case.classname == container or case.classname.startswith(container + "."):
        return True
    if len(names) < 2 or case.classname != ".".join(names[:-1]):
        return False
    return case.name == names[-1] or case.name.startswith(names[-1] + "[")
