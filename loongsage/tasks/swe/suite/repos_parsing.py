"""Parsers: key=value pairs, CSV lines, durations, versions, INI files, arithmetic."""

from __future__ import annotations

from loongsage.tasks.swe.suite.spec import Bug, SuiteTask, source

KVPARSE = {
    "kvparse.py": source('''
        """Parsing "key=value; other=value" strings."""


        def parse_pairs(text, separator=";"):
            result = {}
            for chunk in text.split(separator):
                chunk = chunk.strip()
                if not chunk:
                    continue
                if "=" not in chunk:
                    raise ValueError(f"missing '=' in {chunk!r}")
                key, value = chunk.split("=", 1)
                result[key.strip()] = value.strip()
            return result


        def format_pairs(pairs, separator="; "):
            return separator.join(f"{key}={value}" for key, value in pairs.items())
    '''),
    "tests/test_kvparse.py": source("""
        import pytest

        from kvparse import format_pairs, parse_pairs


        def test_simple_pairs():
            assert parse_pairs("a=1; b=2") == {"a": "1", "b": "2"}


        def test_value_with_equals_sign():
            assert parse_pairs("token=abc==; x=1") == {"token": "abc==", "x": "1"}


        def test_trailing_separator():
            assert parse_pairs("a=1;") == {"a": "1"}


        def test_missing_equals():
            with pytest.raises(ValueError):
                parse_pairs("a=1; oops")


        def test_round_trip():
            pairs = {"a": "1", "b": "two"}
            assert parse_pairs(format_pairs(pairs)) == pairs
    """),
}

CSVLINE = {
    "csvline.py": source('''
        """Splitting one CSV line; double quotes protect delimiters, "" is a literal quote."""


        def split_csv_line(line, delimiter=","):
            fields, current, quoted = [], [], False
            index = 0
            while index < len(line):
                char = line[index]
                if quoted:
                    if char == '"' and line[index + 1:index + 2] == '"':
                        current.append('"')
                        index += 1
                    elif char == '"':
                        quoted = False
                    else:
                        current.append(char)
                elif char == '"':
                    quoted = True
                elif char == delimiter:
                    fields.append("".join(current))
                    current = []
                else:
                    current.append(char)
                index += 1
            fields.append("".join(current))
            return fields


        def join_csv_line(fields, delimiter=","):
            return delimiter.join(_quoted(field, delimiter) for field in fields)


        def _quoted(field, delimiter):
            if delimiter in field or '"' in field:
                return '"' + field.replace('"', '""') + '"'
            return field
    '''),
    "tests/test_csvline.py": source('''
        from csvline import join_csv_line, split_csv_line


        def test_plain_fields():
            assert split_csv_line("a,b,c") == ["a", "b", "c"]


        def test_empty_last_field():
            assert split_csv_line("a,b,") == ["a", "b", ""]


        def test_quoted_delimiter():
            assert split_csv_line('x,"1,5",y') == ["x", "1,5", "y"]


        def test_escaped_quote():
            assert split_csv_line('"12"" pipe, steel",4') == ['12" pipe, steel', "4"]


        def test_other_delimiter():
            assert split_csv_line("a;b", delimiter=";") == ["a", "b"]


        def test_join_plain():
            assert join_csv_line(["a", "b"]) == "a,b"


        def test_join_quotes_when_needed():
            assert join_csv_line(["1,5", 'say "hi"']) == '"1,5","say ""hi"""'
    '''),
}

DURATION = {
    "duration.py": source('''
        """Durations such as "1h30m" to seconds and back."""
        import re

        _UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
        _PART = re.compile(r"(\\d+)([dhms])")


        def parse_duration(text):
            text = text.strip().lower()
            if not text or _PART.sub("", text):
                raise ValueError(f"not a duration: {text!r}")
            return sum(int(count) * _UNITS[unit] for count, unit in _PART.findall(text))


        def format_duration(seconds):
            if seconds < 0:
                raise ValueError("negative duration")
            parts = []
            for unit, size in _UNITS.items():
                count, seconds = divmod(seconds, size)
                if count:
                    parts.append(f"{count}{unit}")
            return "".join(parts) or "0s"
    '''),
    "tests/test_duration.py": source("""
        import pytest

        from duration import format_duration, parse_duration


        def test_parse_minutes_and_seconds():
            assert parse_duration("2m5s") == 125


        def test_parse_hours():
            assert parse_duration("1h30m") == 5400


        def test_parse_days():
            assert parse_duration("1d") == 86400


        def test_parse_rejects_garbage():
            with pytest.raises(ValueError):
                parse_duration("5 minutes")


        def test_format_mixed():
            assert format_duration(3725) == "1h2m5s"


        def test_format_zero():
            assert format_duration(0) == "0s"
    """),
}

SEMVER = {
    "semver.py": source('''
        """Versions MAJOR.MINOR.PATCH, optionally written with a leading "v"."""


        def parse_version(text):
            parts = text.strip().lstrip("v").split(".")
            if len(parts) != 3 or not all(part.isdigit() for part in parts):
                raise ValueError(f"not a version: {text!r}")
            return tuple(int(part) for part in parts)


        def compare_versions(a, b):
            """-1, 0 or 1 as a is older than, equal to or newer than b."""
            left, right = parse_version(a), parse_version(b)
            return (left > right) - (left < right)


        def bump(version, part):
            major, minor, patch = parse_version(version)
            if part == "major":
                return f"{major + 1}.0.0"
            if part == "minor":
                return f"{major}.{minor + 1}.0"
            if part == "patch":
                return f"{major}.{minor}.{patch + 1}"
            raise ValueError(f"unknown part {part!r}")
    '''),
    "tests/test_semver.py": source("""
        import pytest

        from semver import bump, compare_versions, parse_version


        def test_parse_with_v_prefix():
            assert parse_version("v1.2.3") == (1, 2, 3)


        def test_compare_equal():
            assert compare_versions("1.2.3", "1.2.3") == 0


        def test_compare_numeric_not_textual():
            assert compare_versions("1.10.0", "1.9.0") == 1


        def test_bump_minor_resets_patch():
            assert bump("1.4.7", "minor") == "1.5.0"


        def test_bump_major():
            assert bump("1.4.7", "major") == "2.0.0"


        def test_bump_unknown_part():
            with pytest.raises(ValueError):
                bump("1.0.0", "build")
    """),
}

INIPARSE = {
    "iniparse.py": source('''
        """A small INI reader: [sections], key = value lines, ; and # comments."""


        def parse_ini(text):
            sections = {}
            current = None
            for number, raw in enumerate(text.splitlines(), start=1):
                line = raw.strip()
                if not line or line[0] in ";#":
                    continue
                if line.startswith("[") and line.endswith("]"):
                    current = sections.setdefault(line[1:-1].strip(), {})
                elif "=" in line and current is not None:
                    key, value = line.split("=", 1)
                    current[key.strip()] = value.strip()
                else:
                    raise ValueError(f"line {number}: cannot parse {raw!r}")
            return sections
    '''),
    "tests/test_iniparse.py": source("""
        import pytest

        from iniparse import parse_ini


        def test_sections_and_keys():
            text = "[server]\\nhost = example.org\\nport = 8080\\n[client]\\nretries=3\\n"
            assert parse_ini(text) == {
                "server": {"host": "example.org", "port": "8080"},
                "client": {"retries": "3"},
            }


        def test_comments_and_blank_lines():
            text = "; settings\\n[a]\\n# the key\\n\\nk = v\\n"
            assert parse_ini(text) == {"a": {"k": "v"}}


        def test_key_before_section():
            with pytest.raises(ValueError, match="line 1"):
                parse_ini("k = v\\n")


        def test_garbage_line():
            with pytest.raises(ValueError, match="line 2"):
                parse_ini("[a]\\nnot a pair\\n")
    """),
}

CALC = {
    "calc/__init__.py": "",
    "calc/tokens.py": source('''
        """Splitting an arithmetic expression into numbers, operators and parentheses."""
        import re

        _TOKEN = re.compile(r"\\s*(?:(\\d+\\.?\\d*)|(.))")


        def tokenize(text):
            tokens = []
            for number, other in _TOKEN.findall(text):
                if number:
                    tokens.append(float(number) if "." in number else int(number))
                elif other.strip():
                    if other not in "+-*/()":
                        raise ValueError(f"unexpected character {other!r}")
                    tokens.append(other)
            return tokens
    '''),
    "calc/evaluate.py": source('''
        """Evaluating + - * / with precedence and parentheses (shunting-yard)."""
        from calc.tokens import tokenize

        _PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}


        def evaluate(text):
            output, operators = [], []
            for token in tokenize(text):
                if isinstance(token, (int, float)):
                    output.append(token)
                elif token == "(":
                    operators.append(token)
                elif token == ")":
                    while operators and operators[-1] != "(":
                        _apply(output, operators.pop())
                    if not operators:
                        raise ValueError("unbalanced parentheses")
                    operators.pop()
                else:
                    # Left associative: pop operators of equal or higher precedence first.
                    while operators and operators[-1] != "(" and _PRECEDENCE[operators[-1]] >= _PRECEDENCE[token]:
                        _apply(output, operators.pop())
                    operators.append(token)
            while operators:
                operator = operators.pop()
                if operator == "(":
                    raise ValueError("unbalanced parentheses")
                _apply(output, operator)
            if len(output) != 1:
                raise ValueError("malformed expression")
            return output[0]


        def _apply(output, operator):
            if len(output) < 2:
                raise ValueError("malformed expression")
            right, left = output.pop(), output.pop()
            if operator == "+":
                output.append(left + right)
            elif operator == "-":
                output.append(left - right)
            elif operator == "*":
                output.append(left * right)
            else:
                output.append(left / right)
    '''),
    "tests/test_calc.py": source("""
        import pytest

        from calc.evaluate import evaluate
        from calc.tokens import tokenize


        def test_tokenize():
            assert tokenize("2 * (3.5+1)") == [2, "*", "(", 3.5, "+", 1, ")"]


        def test_precedence():
            assert evaluate("2 + 3 * 4") == 14


        def test_parentheses():
            assert evaluate("(2 + 3) * 4") == 20


        def test_subtraction_is_left_associative():
            assert evaluate("10 - 3 - 2") == 5


        def test_division_is_left_associative():
            assert evaluate("64 / 4 / 2") == 8


        def test_unbalanced():
            with pytest.raises(ValueError):
                evaluate("(1 + 2")
    """),
}

TASKS = [
    SuiteTask(
        instance_id="kvparse__value-with-equals",
        difficulty="medium",
        problem_statement="""
            parse_pairs crashes on values that contain "="

            ```python
            >>> from kvparse import parse_pairs
            >>> parse_pairs("token=abc==; x=1")
            ValueError: too many values to unpack (expected 2)
            ```

            Expected `{"token": "abc==", "x": "1"}`: only the first "=" separates the key from
            the value (base64 tokens end with "=").
        """,
        files=KVPARSE,
        bugs=(Bug("kvparse.py", 'chunk.split("=", 1)', 'chunk.split("=")'),),
        fail_to_pass=("tests/test_kvparse.py::test_value_with_equals_sign",),
        pass_to_pass=(
            "tests/test_kvparse.py::test_simple_pairs",
            "tests/test_kvparse.py::test_trailing_separator",
            "tests/test_kvparse.py::test_round_trip",
        ),
    ),
    SuiteTask(
        instance_id="kvparse__trailing-separator",
        difficulty="medium",
        problem_statement="""
            A trailing ";" makes parse_pairs fail

            ```python
            >>> from kvparse import parse_pairs
            >>> parse_pairs("a=1;")
            ValueError: missing '=' in ''
            ```

            Expected `{"a": "1"}`: empty chunks (after a trailing separator or between two
            separators) should be ignored.
        """,
        files=KVPARSE,
        bugs=(Bug("kvparse.py", "        if not chunk:\n            continue\n", ""),),
        fail_to_pass=("tests/test_kvparse.py::test_trailing_separator",),
        pass_to_pass=(
            "tests/test_kvparse.py::test_simple_pairs",
            "tests/test_kvparse.py::test_missing_equals",
            "tests/test_kvparse.py::test_round_trip",
        ),
    ),
    SuiteTask(
        instance_id="csvline__escaped-quote",
        difficulty="hard",
        problem_statement="""
            Doubled quotes inside a quoted CSV field are mangled

            In CSV, `""` inside a quoted field stands for one literal quote:

            ```python
            >>> from csvline import split_csv_line
            >>> split_csv_line('"12"" pipe, steel",4')
            ['12" pipe', ' steel,4']
            ```

            Expected `['12" pipe, steel', '4']`: the quoted field ends at the last quote, not
            at the doubled one.
        """,
        files=CSVLINE,
        bugs=(
            Bug(
                "csvline.py",
                "                current.append('\"')\n                index += 1\n",
                "                current.append('\"')\n",
            ),
        ),
        fail_to_pass=("tests/test_csvline.py::test_escaped_quote",),
        pass_to_pass=(
            "tests/test_csvline.py::test_plain_fields",
            "tests/test_csvline.py::test_quoted_delimiter",
            "tests/test_csvline.py::test_empty_last_field",
        ),
    ),
    SuiteTask(
        instance_id="csvline__last-field",
        difficulty="medium",
        problem_statement="""
            split_csv_line drops the last field

            ```python
            >>> from csvline import split_csv_line
            >>> split_csv_line("a,b,c")
            ['a', 'b']
            ```

            Expected `['a', 'b', 'c']`. With a trailing comma (`"a,b,"`) the empty last field
            is missing too.
        """,
        files=CSVLINE,
        bugs=(Bug("csvline.py", '        index += 1\n    fields.append("".join(current))\n', "        index += 1\n"),),
        fail_to_pass=(
            "tests/test_csvline.py::test_plain_fields",
            "tests/test_csvline.py::test_empty_last_field",
            "tests/test_csvline.py::test_other_delimiter",
        ),
        pass_to_pass=("tests/test_csvline.py::test_join_plain", "tests/test_csvline.py::test_join_quotes_when_needed"),
    ),
    SuiteTask(
        instance_id="duration__hour-constant",
        difficulty="easy",
        problem_statement="""
            `parse_duration` in duration.py gets hours wrong

            ```python
            >>> from duration import parse_duration
            >>> parse_duration("1h30m")
            2160
            ```

            Expected `5400` (one hour is 3600 seconds). Minutes, seconds and days are fine.
        """,
        files=DURATION,
        bugs=(Bug("duration.py", '"h": 3600', '"h": 360'),),
        fail_to_pass=("tests/test_duration.py::test_parse_hours", "tests/test_duration.py::test_format_mixed"),
        pass_to_pass=(
            "tests/test_duration.py::test_parse_minutes_and_seconds",
            "tests/test_duration.py::test_parse_days",
            "tests/test_duration.py::test_format_zero",
        ),
    ),
    SuiteTask(
        instance_id="duration__format-divmod",
        difficulty="easy",
        problem_statement="""
            `format_duration` in duration.py crashes or prints nonsense

            ```python
            >>> from duration import format_duration
            >>> format_duration(3725)
            '23d4h'
            >>> format_duration(0)
            ZeroDivisionError: integer division or modulo by zero
            ```

            Expected `'1h2m5s'` and `'0s'`. The arguments of `divmod` in the loop look swapped.
        """,
        files=DURATION,
        bugs=(Bug("duration.py", "divmod(seconds, size)", "divmod(size, seconds)"),),
        fail_to_pass=("tests/test_duration.py::test_format_mixed", "tests/test_duration.py::test_format_zero"),
        pass_to_pass=(
            "tests/test_duration.py::test_parse_minutes_and_seconds",
            "tests/test_duration.py::test_parse_hours",
            "tests/test_duration.py::test_parse_rejects_garbage",
        ),
    ),
    SuiteTask(
        instance_id="semver__numeric-compare",
        difficulty="medium",
        problem_statement="""
            compare_versions says 1.10.0 is older than 1.9.0

            ```python
            >>> from semver import compare_versions
            >>> compare_versions("1.10.0", "1.9.0")
            -1
            ```

            Expected `1`. Version parts must be compared as numbers, not as text.
        """,
        files=SEMVER,
        bugs=(Bug("semver.py", "return tuple(int(part) for part in parts)", "return tuple(parts)"),),
        fail_to_pass=(
            "tests/test_semver.py::test_parse_with_v_prefix",
            "tests/test_semver.py::test_compare_numeric_not_textual",
        ),
        pass_to_pass=("tests/test_semver.py::test_compare_equal", "tests/test_semver.py::test_bump_unknown_part"),
    ),
    SuiteTask(
        instance_id="semver__bump-minor",
        difficulty="easy",
        problem_statement="""
            `bump` in semver.py keeps the patch number when bumping the minor version

            ```python
            >>> from semver import bump
            >>> bump("1.4.7", "minor")
            '1.5.7'
            ```

            Expected `'1.5.0'`: bumping the minor version resets the patch to 0.
        """,
        files=SEMVER,
        bugs=(Bug("semver.py", 'return f"{major}.{minor + 1}.0"', 'return f"{major}.{minor + 1}.{patch}"'),),
        fail_to_pass=("tests/test_semver.py::test_bump_minor_resets_patch",),
        pass_to_pass=(
            "tests/test_semver.py::test_bump_major",
            "tests/test_semver.py::test_compare_numeric_not_textual",
            "tests/test_semver.py::test_parse_with_v_prefix",
        ),
    ),
    SuiteTask(
        instance_id="iniparse__comments",
        difficulty="medium",
        problem_statement="""
            parse_ini rejects files with comments

            ```python
            >>> from iniparse import parse_ini
            >>> parse_ini("; settings\\n[a]\\n# the key\\n\\nk = v\\n")
            ValueError: line 1: cannot parse '; settings'
            ```

            Expected `{"a": {"k": "v"}}`: lines starting with ";" or "#" are comments.
        """,
        files=INIPARSE,
        bugs=(Bug("iniparse.py", 'if not line or line[0] in ";#":', "if not line:"),),
        fail_to_pass=("tests/test_iniparse.py::test_comments_and_blank_lines",),
        pass_to_pass=(
            "tests/test_iniparse.py::test_sections_and_keys",
            "tests/test_iniparse.py::test_key_before_section",
            "tests/test_iniparse.py::test_garbage_line",
        ),
    ),
    SuiteTask(
        instance_id="calc__left-associative",
        difficulty="hard",
        problem_statement="""
            Chained subtraction and division give wrong results

            ```python
            >>> from calc.evaluate import evaluate
            >>> evaluate("10 - 3 - 2")
            9
            >>> evaluate("64 / 4 / 2")
            32.0
            ```

            Expected `5` and `8.0`: operators of the same precedence must be applied from left
            to right. `evaluate("2 + 3 * 4")` is right (14).
        """,
        files=CALC,
        bugs=(
            Bug(
                "calc/evaluate.py",
                "_PRECEDENCE[operators[-1]] >= _PRECEDENCE[token]",
                "_PRECEDENCE[operators[-1]] > _PRECEDENCE[token]",
            ),
        ),
        fail_to_pass=(
            "tests/test_calc.py::test_subtraction_is_left_associative",
            "tests/test_calc.py::test_division_is_left_associative",
        ),
        pass_to_pass=(
            "tests/test_calc.py::test_tokenize",
            "tests/test_calc.py::test_precedence",
            "tests/test_calc.py::test_parentheses",
            "tests/test_calc.py::test_unbalanced",
        ),
    ),
    SuiteTask(
        instance_id="calc__decimal-numbers",
        difficulty="hard",
        problem_statement="""
            Decimal numbers are split into two tokens

            ```python
            >>> from calc.tokens import tokenize
            >>> tokenize("2 * (3.5+1)")
            ValueError: unexpected character '.'
            ```

            Expected `[2, '*', '(', 3.5, '+', 1, ')']`, and `evaluate("3.5 * 2")` should be
            `7.0`.
        """,
        files=CALC,
        bugs=(Bug("calc/tokens.py", 'r"\\s*(?:(\\d+\\.?\\d*)|(.))"', 'r"\\s*(?:(\\d+)|(.))"'),),
        fail_to_pass=("tests/test_calc.py::test_tokenize",),
        pass_to_pass=(
            "tests/test_calc.py::test_precedence",
            "tests/test_calc.py::test_parentheses",
            "tests/test_calc.py::test_subtraction_is_left_associative",
        ),
    ),
]
