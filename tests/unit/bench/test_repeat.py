"""The benches' repeat helper: interleaving order, per-pair ratios, median and range as printed."""

from __future__ import annotations

import argparse

import pytest

from loongsage.bench.repeat import add_repeats_argument, interleaved, pair_ratios, ratio_line, runs_note


def test_runs_alternate_base_first_and_results_come_back_per_side_in_run_order():
    calls = []

    def side(name):
        def run(index):
            calls.append((name, index))
            return f"{name}{index}"

        return run

    base, ours = interleaved(side("base"), side("ours"), 3)
    assert calls == [("base", 0), ("ours", 0), ("base", 1), ("ours", 1), ("base", 2), ("ours", 2)]
    assert (base, ours) == (["base0", "base1", "base2"], ["ours0", "ours1", "ours2"])


def test_zero_repeats_is_refused_before_anything_runs():
    with pytest.raises(ValueError, match="at least 1"):
        interleaved(lambda i: pytest.fail("ran"), lambda i: pytest.fail("ran"), 0)


def test_ratios_are_per_pair_and_the_line_gives_their_median_and_range():
    # sync 10, 12, 9 s against fully_async 8, 6, 6 s: pairs 1.25, 2.00, 1.50 -> median 1.50.
    ratios = pair_ratios([10.0, 12.0, 9.0], [8.0, 6.0, 6.0])
    assert ratios == [1.25, 2.0, 1.5]
    assert ratio_line("sync / fully_async loop time", ratios) == (
        "ratio (sync / fully_async loop time): median 1.50x over 3 interleaved pairs (range 1.25x-2.00x)"
    )


def test_even_count_takes_the_mean_of_the_middle_two_and_digits_are_honoured():
    assert ratio_line("r", [1.0, 1.01, 1.03, 1.2], digits=3) == (
        "ratio (r): median 1.020x over 4 interleaved pairs (range 1.000x-1.200x)"
    )


def test_one_pair_reads_in_the_singular():
    assert ratio_line("a / b", pair_ratios([3.0], [2.0])) == (
        "ratio (a / b): median 1.50x over 1 interleaved pair (range 1.50x-1.50x)"
    )
    assert runs_note([50.74]) == "median of 1 run: 50.7"


def test_pairs_must_match():
    with pytest.raises(ValueError, match="not pairs"):
        pair_ratios([1.0, 2.0], [1.0])


def test_runs_note_lists_values_in_run_order():
    assert runs_note([50.7, 49.24, 51.0]) == "median of 3 runs: 50.7, 49.2, 51.0"
    assert runs_note([0.123, 0.2], digits=2) == "median of 2 runs: 0.12, 0.20"


def test_repeats_flag_defaults_to_three_keeps_old_names_and_refuses_zero():
    parser = argparse.ArgumentParser()
    add_repeats_argument(parser, "--rounds")
    assert parser.parse_args([]).repeats == 3
    assert parser.parse_args(["--rounds", "2"]).repeats == 2
    assert parser.parse_args(["--repeats", "1"]).repeats == 1
    with pytest.raises(SystemExit):
        parser.parse_args(["--repeats", "0"])
