"""Untrusted JSON bodies: every way Python's json can fail or let through unencodable text is a
JsonInputError naming where in the body it sits."""

from __future__ import annotations

import json
import math

import pytest

from loongsage.json_input import MAX_DEPTH, JsonInputError, parse_json


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _error(data) -> JsonInputError:
    with pytest.raises(JsonInputError) as raised:
        parse_json(data)
    return raised.value


def test_nesting_up_to_the_limit_parses_and_one_more_names_where():
    assert parse_json(_nested(MAX_DEPTH)) is not None
    error = _error('{"a": {"b": ' + _nested(MAX_DEPTH - 1) + "}}")
    assert error.field == "a.b" + "[0]" * (MAX_DEPTH - 2) and "nested deeper than 64" in error.message
    assert _error(_nested(100_000)).field == "body"  # refused from the scan, before json.loads recurses
    assert _error("[" * 100_000).field == "body"


def test_brackets_inside_strings_do_not_count_as_nesting():
    code = "x = [[[[" * 500 + ' "quoted \\" [{" '
    assert parse_json(json.dumps({"content": code})) == {"content": code}


def test_unencodable_text_is_located_in_values_and_keys():
    assert _error('{"messages": [{"content": "a\\ud800"}]}').field == "messages[0].content"
    error = _error('{"tools": {"\\udfff": 1}}')
    assert error.field == "tools" and "surrogate" in error.message
    assert parse_json('"\\ud83d\\ude00"') == "\U0001f600"  # a proper surrogate pair is fine


def test_over_long_integer_literals_are_located():
    error = _error('{"seed": ' + "9" * 5000 + "}")
    assert error.field == "seed" and "5000 digits" in error.message
    assert _error('{"a": [1, -' + "9" * 5000 + "]}").field == "a[1]"
    assert parse_json("9" * 4000) == int("9" * 4000)


def test_invalid_json_and_bytes_are_body_errors():
    assert "not valid JSON" in _error('{"a": ').message
    assert _error(b'{"a": "\xff"}').field == "body"


def test_nan_and_infinity_parse_for_the_field_checks_to_refuse():
    value = parse_json('{"t": NaN, "u": Infinity, "v": 1e999}')
    assert math.isnan(value["t"]) and value["u"] == math.inf == value["v"]
