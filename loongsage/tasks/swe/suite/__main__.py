"""`python -m loongsage.tasks.swe.suite [--out PATH]`: write the bundled suite as JSONL."""

from __future__ import annotations

import argparse
from collections import Counter

from loongsage.logs import setup_logging
from loongsage.tasks.swe.bundled import BUNDLED_TASKS_PATH
from loongsage.tasks.swe.suite import write_suite


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loongsage.tasks.swe.suite", description=__doc__)
    parser.add_argument("--out", default=str(BUNDLED_TASKS_PATH), help=f"output JSONL (default: {BUNDLED_TASKS_PATH})")
    args = parser.parse_args(argv)
    tasks = write_suite(args.out)
    by_difficulty = Counter(task.difficulty for task in tasks)
    print(f"wrote {len(tasks)} tasks to {args.out} ({', '.join(f'{n} {d}' for d, n in sorted(by_difficulty.items()))})")
    return 0


if __name__ == "__main__":
    setup_logging(results_on_stdout=True)  # stdout is the one line saying what was written
    raise SystemExit(main())
