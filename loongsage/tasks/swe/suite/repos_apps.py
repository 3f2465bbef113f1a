"""Small applications: a date library, a unit-conversion CLI, a shopping cart."""

from __future__ import annotations

from loongsage.tasks.swe.suite.spec import Bug, SuiteTask, source

DATEKIT = {
    "datekit.py": source('''
        """Calendar arithmetic on (year, month, day) without the datetime module."""

        _DAYS_IN_MONTH = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


        def is_leap_year(year):
            return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


        def days_in_month(year, month):
            if not 1 <= month <= 12:
                raise ValueError(f"month must be 1..12, got {month}")
            if month == 2 and is_leap_year(year):
                return 29
            return _DAYS_IN_MONTH[month - 1]


        def day_of_year(year, month, day):
            if not 1 <= day <= days_in_month(year, month):
                raise ValueError(f"no day {day} in {year}-{month:02d}")
            return sum(days_in_month(year, earlier) for earlier in range(1, month)) + day


        def add_months(year, month, day, months):
            """The same day `months` later; a day past the new month's end becomes its last day."""
            index = year * 12 + (month - 1) + months
            new_year, new_month = divmod(index, 12)
            new_month += 1
            return new_year, new_month, min(day, days_in_month(new_year, new_month))
    '''),
    "tests/test_datekit.py": source("""
        import pytest

        from datekit import add_months, day_of_year, days_in_month, is_leap_year


        def test_leap_years():
            assert is_leap_year(2024)
            assert is_leap_year(2000)


        def test_century_not_leap():
            assert not is_leap_year(1900)


        def test_february_in_leap_year():
            assert days_in_month(2024, 2) == 29


        def test_day_of_year():
            assert day_of_year(2023, 3, 1) == 60


        def test_invalid_day():
            with pytest.raises(ValueError):
                day_of_year(2023, 2, 29)


        def test_add_months_across_year():
            assert add_months(2023, 11, 15, 3) == (2024, 2, 15)


        def test_add_months_clamps_day():
            assert add_months(2023, 1, 31, 1) == (2023, 2, 28)
    """),
}

UNITCONV = {
    "unitconv/__init__.py": "",
    "unitconv/units.py": source('''
        """Length units and conversion between them."""

        METERS_PER_UNIT = {"m": 1.0, "km": 1000.0, "cm": 0.01, "mi": 1609.344, "ft": 0.3048, "in": 0.0254}


        def convert(value, from_unit, to_unit):
            for unit in (from_unit, to_unit):
                if unit not in METERS_PER_UNIT:
                    raise ValueError(f"unknown unit {unit!r}; known: {', '.join(sorted(METERS_PER_UNIT))}")
            return value * METERS_PER_UNIT[from_unit] / METERS_PER_UNIT[to_unit]
    '''),
    "unitconv/cli.py": source('''
        """Command line: python -m unitconv.cli VALUE FROM TO [--precision N]."""
        import argparse
        import sys

        from unitconv.units import convert


        def main(argv=None):
            parser = argparse.ArgumentParser(prog="unitconv")
            parser.add_argument("value", type=float)
            parser.add_argument("from_unit")
            parser.add_argument("to_unit")
            parser.add_argument("--precision", type=int, default=2)
            args = parser.parse_args(argv)
            try:
                result = convert(args.value, args.from_unit, args.to_unit)
            except ValueError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 1
            print(f"{result:.{args.precision}f} {args.to_unit}")
            return 0


        if __name__ == "__main__":
            sys.exit(main())
    '''),
    "tests/test_units.py": source("""
        import pytest

        from unitconv.units import convert


        def test_same_unit():
            assert convert(5, "m", "m") == 5


        def test_km_to_m():
            assert convert(2, "km", "m") == 2000


        def test_feet_to_inches():
            assert convert(1, "ft", "in") == pytest.approx(12)


        def test_unknown_unit():
            with pytest.raises(ValueError, match="parsec"):
                convert(1, "m", "parsec")
    """),
    "tests/test_cli.py": source("""
        from unitconv.cli import main


        def test_cli_converts(capsys):
            assert main(["2", "km", "m"]) == 0
            assert capsys.readouterr().out == "2000.00 m\\n"


        def test_cli_precision(capsys):
            main(["1", "mi", "km", "--precision", "3"])
            assert capsys.readouterr().out == "1.609 km\\n"


        def test_cli_unknown_unit(capsys):
            assert main(["1", "parsec", "m"]) == 1
            assert "unknown unit 'parsec'" in capsys.readouterr().err
    """),
}

SHOP = {
    "shop/__init__.py": "",
    "shop/pricing.py": source('''
        """Prices in integer cents and quantity discounts."""


        def apply_discount(price_cents, percent):
            if not 0 <= percent <= 100:
                raise ValueError(f"discount must be 0..100 percent, got {percent}")
            return round(price_cents * (100 - percent) / 100)


        def bulk_discount(quantity):
            """Percent off for buying many of one item: 15 from 100 pieces, 5 from 10."""
            if quantity >= 100:
                return 15
            if quantity >= 10:
                return 5
            return 0
    '''),
    "shop/cart.py": source('''
        """A shopping cart of SKUs with unit prices."""
        from shop.pricing import apply_discount, bulk_discount


        class Cart:
            def __init__(self):
                self.lines = {}

            def add(self, sku, unit_cents, quantity=1):
                if quantity < 1:
                    raise ValueError("quantity must be at least 1")
                line = self.lines.setdefault(sku, {"unit_cents": unit_cents, "quantity": 0})
                line["quantity"] += quantity

            def remove(self, sku):
                if sku not in self.lines:
                    raise KeyError(f"{sku!r} is not in the cart")
                del self.lines[sku]

            def total_cents(self):
                return sum(
                    apply_discount(line["unit_cents"] * line["quantity"], bulk_discount(line["quantity"]))
                    for line in self.lines.values()
                )
    '''),
    "tests/test_pricing.py": source("""
        import pytest

        from shop.pricing import apply_discount, bulk_discount


        def test_apply_discount():
            assert apply_discount(1000, 15) == 850


        def test_bad_discount():
            with pytest.raises(ValueError):
                apply_discount(1000, 120)


        def test_bulk_tiers():
            assert [bulk_discount(q) for q in (1, 10, 99, 100)] == [0, 5, 5, 15]
    """),
    "tests/test_cart.py": source("""
        import pytest

        from shop.cart import Cart


        def test_total_single_item():
            cart = Cart()
            cart.add("pen", 150, 2)
            assert cart.total_cents() == 300


        def test_adding_same_item_twice():
            cart = Cart()
            cart.add("pen", 150)
            cart.add("pen", 150, 2)
            assert cart.lines["pen"]["quantity"] == 3
            assert cart.total_cents() == 450


        def test_bulk_discount_applies():
            cart = Cart()
            cart.add("clip", 10, 100)
            assert cart.total_cents() == 850


        def test_remove():
            cart = Cart()
            cart.add("pen", 150)
            cart.remove("pen")
            assert cart.total_cents() == 0
            with pytest.raises(KeyError):
                cart.remove("pen")
    """),
}

TASKS = [
    SuiteTask(
        instance_id="datekit__leap-year",
        difficulty="easy",
        problem_statement="""
            `is_leap_year` in datekit.py says 2024 is not a leap year

            ```python
            >>> from datekit import is_leap_year, days_in_month
            >>> is_leap_year(2024)
            False
            >>> days_in_month(2024, 2)
            28
            ```

            Expected `True` and `29`. A year is a leap year when it is divisible by 4, except
            centuries, which must be divisible by 400.
        """,
        files=DATEKIT,
        bugs=(Bug("datekit.py", "(year % 100 != 0 or year % 400 == 0)", "(year % 100 != 0 and year % 400 == 0)"),),
        fail_to_pass=("tests/test_datekit.py::test_leap_years", "tests/test_datekit.py::test_february_in_leap_year"),
        pass_to_pass=(
            "tests/test_datekit.py::test_century_not_leap",
            "tests/test_datekit.py::test_day_of_year",
            "tests/test_datekit.py::test_add_months_across_year",
        ),
    ),
    SuiteTask(
        instance_id="datekit__add-months-clamp",
        difficulty="medium",
        problem_statement="""
            add_months produces dates that do not exist

            ```python
            >>> from datekit import add_months
            >>> add_months(2023, 1, 31, 1)
            (2023, 2, 31)
            ```

            Expected `(2023, 2, 28)`: when the day does not exist in the new month, the
            result should be that month's last day, as the docstring says.
        """,
        files=DATEKIT,
        bugs=(
            Bug(
                "datekit.py",
                "return new_year, new_month, min(day, days_in_month(new_year, new_month))",
                "return new_year, new_month, day",
            ),
        ),
        fail_to_pass=("tests/test_datekit.py::test_add_months_clamps_day",),
        pass_to_pass=(
            "tests/test_datekit.py::test_add_months_across_year",
            "tests/test_datekit.py::test_leap_years",
            "tests/test_datekit.py::test_invalid_day",
        ),
    ),
    SuiteTask(
        instance_id="unitconv__convert-inverted",
        difficulty="easy",
        problem_statement="""
            `convert` in unitconv/units.py divides where it should multiply

            ```python
            >>> from unitconv.units import convert
            >>> convert(2, "km", "m")
            0.002
            ```

            Expected `2000`. The command line is wrong as well:
            `python -m unitconv.cli 2 km m` prints `0.00 m` instead of `2000.00 m`.
        """,
        files=UNITCONV,
        bugs=(
            Bug(
                "unitconv/units.py",
                "METERS_PER_UNIT[from_unit] / METERS_PER_UNIT[to_unit]",
                "METERS_PER_UNIT[to_unit] / METERS_PER_UNIT[from_unit]",
            ),
        ),
        fail_to_pass=("tests/test_units.py::test_km_to_m", "tests/test_cli.py::test_cli_converts"),
        pass_to_pass=(
            "tests/test_units.py::test_same_unit",
            "tests/test_units.py::test_unknown_unit",
            "tests/test_cli.py::test_cli_unknown_unit",
        ),
    ),
    SuiteTask(
        instance_id="unitconv__cli-argument-order",
        difficulty="medium",
        problem_statement="""
            The unitconv command converts in the wrong direction

            ```
            $ python -m unitconv.cli 2 km m
            0.00 m
            ```

            Expected `2000.00 m`. Calling `unitconv.units.convert(2, "km", "m")` directly
            gives the right answer (2000.0), so the problem is in the command line.
        """,
        files=UNITCONV,
        bugs=(
            Bug(
                "unitconv/cli.py",
                "convert(args.value, args.from_unit, args.to_unit)",
                "convert(args.value, args.to_unit, args.from_unit)",
            ),
        ),
        fail_to_pass=("tests/test_cli.py::test_cli_converts", "tests/test_cli.py::test_cli_precision"),
        pass_to_pass=(
            "tests/test_cli.py::test_cli_unknown_unit",
            "tests/test_units.py::test_km_to_m",
            "tests/test_units.py::test_feet_to_inches",
        ),
    ),
    SuiteTask(
        instance_id="unitconv__cli-exit-code",
        difficulty="easy",
        problem_statement="""
            `main` in unitconv/cli.py exits with status 0 for an unknown unit

            ```python
            >>> from unitconv.cli import main
            >>> main(["1", "parsec", "m"])
            error: unknown unit 'parsec'; known: cm, ft, in, km, m, mi
            0
            ```

            The error message is right, but the exit status is 0. Expected `1`, so that
            scripts notice the failure.
        """,
        files=UNITCONV,
        bugs=(Bug("unitconv/cli.py", "        return 1\n", "        return 0\n"),),
        fail_to_pass=("tests/test_cli.py::test_cli_unknown_unit",),
        pass_to_pass=(
            "tests/test_cli.py::test_cli_converts",
            "tests/test_cli.py::test_cli_precision",
            "tests/test_units.py::test_unknown_unit",
        ),
    ),
    SuiteTask(
        instance_id="shop__add-same-item",
        difficulty="medium",
        problem_statement="""
            Adding an item that is already in the cart replaces its quantity

            ```python
            >>> from shop.cart import Cart
            >>> cart = Cart()
            >>> cart.add("pen", 150)
            >>> cart.add("pen", 150, 2)
            >>> cart.total_cents()
            300
            ```

            Expected `450` (three pens): adding should increase the quantity.
        """,
        files=SHOP,
        bugs=(Bug("shop/cart.py", 'line["quantity"] += quantity', 'line["quantity"] = quantity'),),
        fail_to_pass=("tests/test_cart.py::test_adding_same_item_twice",),
        pass_to_pass=(
            "tests/test_cart.py::test_total_single_item",
            "tests/test_cart.py::test_bulk_discount_applies",
            "tests/test_cart.py::test_remove",
            "tests/test_pricing.py::test_bulk_tiers",
        ),
    ),
    SuiteTask(
        instance_id="shop__bulk-discount-tiers",
        difficulty="hard",
        problem_statement="""
            Buying 100 items only gives the 5% discount

            ```python
            >>> from shop.cart import Cart
            >>> cart = Cart()
            >>> cart.add("clip", 10, 100)
            >>> cart.total_cents()
            950
            ```

            Expected `850`: from 100 pieces the discount is 15%, from 10 pieces 5%.
        """,
        files=SHOP,
        bugs=(
            Bug(
                "shop/pricing.py",
                "    if quantity >= 100:\n        return 15\n    if quantity >= 10:\n        return 5\n",
                "    if quantity >= 10:\n        return 5\n    if quantity >= 100:\n        return 15\n",
            ),
        ),
        fail_to_pass=("tests/test_cart.py::test_bulk_discount_applies", "tests/test_pricing.py::test_bulk_tiers"),
        pass_to_pass=(
            "tests/test_cart.py::test_total_single_item",
            "tests/test_cart.py::test_adding_same_item_twice",
            "tests/test_pricing.py::test_apply_discount",
        ),
    ),
]
