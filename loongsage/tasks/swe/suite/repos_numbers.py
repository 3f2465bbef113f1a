"""Number helpers: statistics, temperature, roman numerals, money, pagination, backoff."""

from __future__ import annotations

from loongsage.tasks.swe.suite.spec import Bug, SuiteTask, source

NUMUTIL = {
    "numutil.py": source('''
        """Small numeric helpers."""


        def clamp(value, low, high):
            """Limit value to the closed range [low, high]."""
            if low > high:
                raise ValueError(f"low {low} is greater than high {high}")
            return max(low, min(value, high))


        def mean(values):
            if not values:
                raise ValueError("mean of an empty sequence")
            return sum(values) / len(values)


        def median(values):
            ordered = sorted(values)
            if not ordered:
                raise ValueError("median of an empty sequence")
            middle = len(ordered) // 2
            if len(ordered) % 2 == 1:
                return ordered[middle]
            return (ordered[middle - 1] + ordered[middle]) / 2
    '''),
    "tests/test_numutil.py": source("""
        import pytest

        from numutil import clamp, mean, median


        def test_clamp_inside_range():
            assert clamp(5, 0, 10) == 5


        def test_clamp_above_range():
            assert clamp(15, 0, 10) == 10


        def test_clamp_below_range():
            assert clamp(-3, 0, 10) == 0


        def test_clamp_rejects_inverted_range():
            with pytest.raises(ValueError):
                clamp(1, 10, 0)


        def test_mean():
            assert mean([2, 4, 9]) == 5


        def test_mean_of_one_value():
            assert mean([7]) == 7


        def test_median_odd_length():
            assert median([3, 1, 2]) == 2


        def test_median_even_length():
            assert median([4, 1, 3, 2]) == 2.5


        def test_median_empty():
            with pytest.raises(ValueError):
                median([])
    """),
}

TEMPERATURE = {
    "temperature.py": source('''
        """Temperature conversions."""

        ABSOLUTE_ZERO_C = -273.15


        def celsius_to_fahrenheit(celsius):
            return celsius * 9 / 5 + 32


        def fahrenheit_to_celsius(fahrenheit):
            return (fahrenheit - 32) * 5 / 9


        def celsius_to_kelvin(celsius):
            if celsius < ABSOLUTE_ZERO_C:
                raise ValueError(f"{celsius} C is below absolute zero")
            return celsius - ABSOLUTE_ZERO_C
    '''),
    "tests/test_temperature.py": source("""
        import pytest

        from temperature import celsius_to_fahrenheit, celsius_to_kelvin, fahrenheit_to_celsius


        def test_boiling_point_in_fahrenheit():
            assert celsius_to_fahrenheit(100) == 212


        def test_body_temperature_in_fahrenheit():
            assert celsius_to_fahrenheit(37) == pytest.approx(98.6)


        def test_freezing_point_in_celsius():
            assert fahrenheit_to_celsius(32) == 0


        def test_boiling_point_in_celsius():
            assert fahrenheit_to_celsius(212) == 100


        def test_kelvin():
            assert celsius_to_kelvin(0) == pytest.approx(273.15)


        def test_below_absolute_zero():
            with pytest.raises(ValueError):
                celsius_to_kelvin(-300)
    """),
}

ROMAN = {
    "roman.py": source('''
        """Roman numerals from 1 to 3999."""

        _NUMERALS = [
            (1000, "M"), (900, "CM"), (500, "D"), (400, "CD"),
            (100, "C"), (90, "XC"), (50, "L"), (40, "XL"),
            (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"),
        ]
        _VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}


        def to_roman(number):
            if not 0 < number < 4000:
                raise ValueError(f"{number} cannot be written in roman numerals")
            out = []
            for value, numeral in _NUMERALS:
                count, number = divmod(number, value)
                out.append(numeral * count)
            return "".join(out)


        def from_roman(text):
            total = 0
            for index, char in enumerate(text):
                value = _VALUES[char]
                if index + 1 < len(text) and _VALUES[text[index + 1]] > value:
                    total -= value
                else:
                    total += value
            return total
    '''),
    "tests/test_roman.py": source("""
        import pytest

        from roman import from_roman, to_roman


        def test_to_roman_simple():
            assert to_roman(3) == "III"


        def test_to_roman_subtractive():
            assert to_roman(1994) == "MCMXCIV"


        def test_to_roman_forty():
            assert to_roman(48) == "XLVIII"


        def test_to_roman_out_of_range():
            with pytest.raises(ValueError):
                to_roman(0)


        def test_from_roman_simple():
            assert from_roman("VIII") == 8


        def test_from_roman_repeated():
            assert from_roman("XX") == 20


        def test_from_roman_subtractive():
            assert from_roman("MCMXCIV") == 1994
    """),
}

MONEY = {
    "money.py": source('''
        """Amounts of money kept as integer cents."""


        def format_cents(cents, symbol="$"):
            """1234567 -> "$12,345.67"; negative amounts get a leading minus."""
            sign = "-" if cents < 0 else ""
            dollars, rest = divmod(abs(cents), 100)
            return f"{sign}{symbol}{dollars:,}.{rest:02d}"


        def split_evenly(total_cents, people):
            """Shares that differ by at most one cent and add up to the total."""
            if people < 1:
                raise ValueError("people must be at least 1")
            share, remainder = divmod(total_cents, people)
            return [share + 1 if index < remainder else share for index in range(people)]
    '''),
    "tests/test_money.py": source("""
        import pytest

        from money import format_cents, split_evenly


        def test_format_thousands():
            assert format_cents(1234567) == "$12,345.67"


        def test_format_small_cents():
            assert format_cents(105) == "$1.05"


        def test_format_negative():
            assert format_cents(-250) == "-$2.50"


        def test_split_exact():
            assert split_evenly(900, 3) == [300, 300, 300]


        def test_split_with_remainder():
            assert split_evenly(1000, 3) == [334, 333, 333]


        def test_split_adds_up():
            assert sum(split_evenly(1001, 4)) == 1001


        def test_split_needs_people():
            with pytest.raises(ValueError):
                split_evenly(100, 0)
    """),
}

PAGINATION = {
    "pagination.py": source('''
        """Splitting a list of items into numbered pages (the first page is 1)."""


        def page_count(total, per_page):
            if per_page < 1:
                raise ValueError("per_page must be at least 1")
            return (total + per_page - 1) // per_page


        def page_items(items, page, per_page):
            if page < 1:
                raise ValueError("pages are numbered from 1")
            start = (page - 1) * per_page
            return items[start:start + per_page]
    '''),
    "tests/test_pagination.py": source("""
        import pytest

        from pagination import page_count, page_items


        def test_page_count_exact():
            assert page_count(20, 10) == 2


        def test_page_count_partial_last_page():
            assert page_count(21, 10) == 3


        def test_page_count_empty():
            assert page_count(0, 10) == 0


        def test_first_page():
            assert page_items(list(range(25)), 1, 10) == list(range(10))


        def test_last_page():
            assert page_items(list(range(25)), 3, 10) == [20, 21, 22, 23, 24]


        def test_page_zero_rejected():
            with pytest.raises(ValueError):
                page_items([1, 2], 0, 10)
    """),
}

BACKOFF = {
    "backoff.py": source('''
        """Delays between retries: exponential growth with an upper cap."""


        def delays(base, factor, retries, cap):
            """The wait before each retry: base, base*factor, base*factor**2, ... never above cap."""
            if retries < 0:
                raise ValueError("retries cannot be negative")
            return [min(cap, base * factor ** attempt) for attempt in range(retries)]


        def total_wait(base, factor, retries, cap):
            return sum(delays(base, factor, retries, cap))
    '''),
    "tests/test_backoff.py": source("""
        import pytest

        from backoff import delays, total_wait


        def test_exponential_growth():
            assert delays(1, 2, 5, 100) == [1, 2, 4, 8, 16]


        def test_capped():
            assert delays(1, 3, 5, 20) == [1, 3, 9, 20, 20]


        def test_no_retries():
            assert delays(1, 2, 0, 10) == []


        def test_negative_retries():
            with pytest.raises(ValueError):
                delays(1, 2, -1, 10)


        def test_total_wait():
            assert total_wait(1, 2, 4, 100) == 15
    """),
}

TASKS = [
    SuiteTask(
        instance_id="numutil__clamp-upper-bound",
        difficulty="easy",
        problem_statement="""
            `clamp` in numutil.py returns the lower bound for almost every value

            `clamp(value, low, high)` in `numutil.py` should limit a value to the range
            [low, high], but it ignores the upper bound:

            ```python
            >>> from numutil import clamp
            >>> clamp(15, 0, 10)
            0
            >>> clamp(5, 0, 10)
            0
            ```

            Expected `10` for the first call (the value is above the range) and `5` for the
            second (the value is inside the range).
        """,
        files=NUMUTIL,
        bugs=(Bug("numutil.py", "min(value, high)", "min(value, low)"),),
        fail_to_pass=(
            "tests/test_numutil.py::test_clamp_inside_range",
            "tests/test_numutil.py::test_clamp_above_range",
        ),
        pass_to_pass=(
            "tests/test_numutil.py::test_clamp_below_range",
            "tests/test_numutil.py::test_clamp_rejects_inverted_range",
            "tests/test_numutil.py::test_mean",
            "tests/test_numutil.py::test_median_even_length",
        ),
    ),
    SuiteTask(
        instance_id="numutil__median-even-length",
        difficulty="easy",
        problem_statement="""
            `median` in numutil.py rounds down for lists of even length

            The median of an even number of values should be the average of the two middle
            values, but `median` in `numutil.py` drops the fraction:

            ```python
            >>> from numutil import median
            >>> median([4, 1, 3, 2])
            2
            ```

            Expected `2.5`.
        """,
        files=NUMUTIL,
        bugs=(Bug("numutil.py", "ordered[middle]) / 2", "ordered[middle]) // 2"),),
        fail_to_pass=("tests/test_numutil.py::test_median_even_length",),
        pass_to_pass=(
            "tests/test_numutil.py::test_median_odd_length",
            "tests/test_numutil.py::test_median_empty",
            "tests/test_numutil.py::test_mean",
            "tests/test_numutil.py::test_clamp_above_range",
        ),
    ),
    SuiteTask(
        instance_id="numutil__mean-divisor",
        difficulty="easy",
        problem_statement="""
            `mean` in numutil.py gives values that are too large

            `mean` in `numutil.py` should be the sum divided by the number of values:

            ```python
            >>> from numutil import mean
            >>> mean([2, 4, 9])
            7.5
            ```

            Expected `5.0`. For a single value it even raises `ZeroDivisionError`
            (`mean([7])`), where `7.0` is expected.
        """,
        files=NUMUTIL,
        bugs=(Bug("numutil.py", "sum(values) / len(values)", "sum(values) / (len(values) - 1)"),),
        fail_to_pass=("tests/test_numutil.py::test_mean", "tests/test_numutil.py::test_mean_of_one_value"),
        pass_to_pass=(
            "tests/test_numutil.py::test_clamp_inside_range",
            "tests/test_numutil.py::test_median_odd_length",
            "tests/test_numutil.py::test_median_even_length",
        ),
    ),
    SuiteTask(
        instance_id="temperature__fahrenheit-factor",
        difficulty="easy",
        problem_statement="""
            `celsius_to_fahrenheit` in temperature.py returns wrong values

            ```python
            >>> from temperature import celsius_to_fahrenheit
            >>> celsius_to_fahrenheit(100)
            87.55555555555556
            ```

            Water boils at 212 F, so I expected `212`. The conversion should be
            `celsius * 9 / 5 + 32`; it looks like the factor is upside down.
        """,
        files=TEMPERATURE,
        bugs=(Bug("temperature.py", "celsius * 9 / 5 + 32", "celsius * 5 / 9 + 32"),),
        fail_to_pass=(
            "tests/test_temperature.py::test_boiling_point_in_fahrenheit",
            "tests/test_temperature.py::test_body_temperature_in_fahrenheit",
        ),
        pass_to_pass=(
            "tests/test_temperature.py::test_freezing_point_in_celsius",
            "tests/test_temperature.py::test_boiling_point_in_celsius",
            "tests/test_temperature.py::test_kelvin",
        ),
    ),
    SuiteTask(
        instance_id="temperature__celsius-precedence",
        difficulty="easy",
        problem_statement="""
            `fahrenheit_to_celsius` in temperature.py is wrong for every input

            ```python
            >>> from temperature import fahrenheit_to_celsius
            >>> fahrenheit_to_celsius(212)
            194.22222222222223
            >>> fahrenheit_to_celsius(32)
            14.222222222222221
            ```

            Expected `100` and `0`: 32 should be subtracted before multiplying by 5/9.
        """,
        files=TEMPERATURE,
        bugs=(Bug("temperature.py", "(fahrenheit - 32) * 5 / 9", "fahrenheit - 32 * 5 / 9"),),
        fail_to_pass=(
            "tests/test_temperature.py::test_freezing_point_in_celsius",
            "tests/test_temperature.py::test_boiling_point_in_celsius",
        ),
        pass_to_pass=(
            "tests/test_temperature.py::test_boiling_point_in_fahrenheit",
            "tests/test_temperature.py::test_kelvin",
            "tests/test_temperature.py::test_below_absolute_zero",
        ),
    ),
    SuiteTask(
        instance_id="roman__from-roman-repeated",
        difficulty="easy",
        problem_statement="""
            `from_roman` in roman.py returns 0 for repeated numerals

            ```python
            >>> from roman import from_roman
            >>> from_roman("XX")
            0
            >>> from_roman("VIII")
            4
            ```

            Expected `20` and `8`. A numeral should only be subtracted when the next one is
            strictly larger (as in "IV"), not when it is equal.
        """,
        files=ROMAN,
        bugs=(Bug("roman.py", "_VALUES[text[index + 1]] > value", "_VALUES[text[index + 1]] >= value"),),
        fail_to_pass=("tests/test_roman.py::test_from_roman_repeated", "tests/test_roman.py::test_from_roman_simple"),
        pass_to_pass=("tests/test_roman.py::test_to_roman_simple", "tests/test_roman.py::test_to_roman_subtractive"),
    ),
    SuiteTask(
        instance_id="roman__to-roman-nine-hundred",
        difficulty="easy",
        problem_statement="""
            `to_roman` in roman.py writes 900 wrongly

            ```python
            >>> from roman import to_roman
            >>> to_roman(1994)
            'MMCXCIV'
            ```

            Expected `'MCMXCIV'`: 900 is written "CM" (100 before 1000), not "MC".
        """,
        files=ROMAN,
        bugs=(Bug("roman.py", '(900, "CM")', '(900, "MC")'),),
        fail_to_pass=("tests/test_roman.py::test_to_roman_subtractive",),
        pass_to_pass=(
            "tests/test_roman.py::test_to_roman_simple",
            "tests/test_roman.py::test_to_roman_forty",
            "tests/test_roman.py::test_from_roman_subtractive",
        ),
    ),
    SuiteTask(
        instance_id="roman__to-roman-forty",
        difficulty="medium",
        problem_statement="""
            Numbers with a 4 in the tens place come out as XXXX

            ```python
            >>> from roman import to_roman
            >>> to_roman(48)
            'XXXXVIII'
            ```

            Expected `'XLVIII'`. `to_roman(1994)` works, so only forty seems affected.
        """,
        files=ROMAN,
        bugs=(Bug("roman.py", '(50, "L"), (40, "XL"),', '(50, "L"),'),),
        fail_to_pass=("tests/test_roman.py::test_to_roman_forty",),
        pass_to_pass=(
            "tests/test_roman.py::test_to_roman_simple",
            "tests/test_roman.py::test_to_roman_subtractive",
            "tests/test_roman.py::test_from_roman_subtractive",
        ),
    ),
    SuiteTask(
        instance_id="money__format-cents-padding",
        difficulty="easy",
        problem_statement="""
            `format_cents` in money.py drops the leading zero of the cents

            ```python
            >>> from money import format_cents
            >>> format_cents(105)
            '$1.5'
            ```

            Expected `'$1.05'`. Amounts with 10 cents or more look right ("$12,345.67").
        """,
        files=MONEY,
        bugs=(Bug("money.py", "{rest:02d}", "{rest}"),),
        fail_to_pass=("tests/test_money.py::test_format_small_cents",),
        pass_to_pass=(
            "tests/test_money.py::test_format_thousands",
            "tests/test_money.py::test_format_negative",
            "tests/test_money.py::test_split_exact",
        ),
    ),
    SuiteTask(
        instance_id="money__split-evenly-remainder",
        difficulty="easy",
        problem_statement="""
            `split_evenly` in money.py hands out one cent too many

            ```python
            >>> from money import split_evenly
            >>> split_evenly(1000, 3)
            [334, 334, 333]
            ```

            That adds up to 1001. Expected `[334, 333, 333]`: only as many people as the
            remainder (here 1) should get the extra cent.
        """,
        files=MONEY,
        bugs=(Bug("money.py", "index < remainder", "index <= remainder"),),
        fail_to_pass=(
            "tests/test_money.py::test_split_with_remainder",
            "tests/test_money.py::test_split_adds_up",
            "tests/test_money.py::test_split_exact",
        ),
        pass_to_pass=(
            "tests/test_money.py::test_format_thousands",
            "tests/test_money.py::test_split_needs_people",
        ),
    ),
    SuiteTask(
        instance_id="pagination__page-count-rounding",
        difficulty="easy",
        problem_statement="""
            `page_count` in pagination.py forgets the last, partly filled page

            ```python
            >>> from pagination import page_count
            >>> page_count(21, 10)
            2
            ```

            Expected `3`: 21 items at 10 per page need three pages.
        """,
        files=PAGINATION,
        bugs=(Bug("pagination.py", "(total + per_page - 1) // per_page", "total // per_page"),),
        fail_to_pass=("tests/test_pagination.py::test_page_count_partial_last_page",),
        pass_to_pass=(
            "tests/test_pagination.py::test_page_count_exact",
            "tests/test_pagination.py::test_page_count_empty",
            "tests/test_pagination.py::test_first_page",
        ),
    ),
    SuiteTask(
        instance_id="pagination__page-items-offset",
        difficulty="easy",
        problem_statement="""
            `page_items` in pagination.py skips the first page

            Pages are numbered from 1, but `page_items` returns the items of the next page:

            ```python
            >>> from pagination import page_items
            >>> page_items(list(range(25)), 1, 10)
            [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
            ```

            Expected `[0, 1, ..., 9]`.
        """,
        files=PAGINATION,
        bugs=(Bug("pagination.py", "start = (page - 1) * per_page", "start = page * per_page"),),
        fail_to_pass=("tests/test_pagination.py::test_first_page", "tests/test_pagination.py::test_last_page"),
        pass_to_pass=(
            "tests/test_pagination.py::test_page_count_exact",
            "tests/test_pagination.py::test_page_zero_rejected",
        ),
    ),
    SuiteTask(
        instance_id="backoff__delays-growth",
        difficulty="easy",
        problem_statement="""
            `delays` in backoff.py grows linearly instead of exponentially

            ```python
            >>> from backoff import delays
            >>> delays(1, 2, 5, 100)
            [0, 2, 4, 6, 8]
            ```

            Expected `[1, 2, 4, 8, 16]`: each delay should be `base * factor ** attempt`.
        """,
        files=BACKOFF,
        bugs=(Bug("backoff.py", "base * factor ** attempt", "base * factor * attempt"),),
        fail_to_pass=(
            "tests/test_backoff.py::test_exponential_growth",
            "tests/test_backoff.py::test_capped",
            "tests/test_backoff.py::test_total_wait",
        ),
        pass_to_pass=("tests/test_backoff.py::test_no_retries", "tests/test_backoff.py::test_negative_retries"),
    ),
]
