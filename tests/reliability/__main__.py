"""``python -m tests.reliability [--long] [--only TEXT] [--markdown]``: run the suite,
print one table of figures, and exit 1 if any figure is off its target."""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime

from tests.reliability.clouds import Clouds
from tests.reliability.figures import Figures, Mode, table
from tests.reliability.scenarios import SCENARIOS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.reliability", description=__doc__)
    parser.add_argument("--long", action="store_true", help="more runs of each scenario")
    parser.add_argument("--only", default="", help="scenarios whose name contains this")
    parser.add_argument("--markdown", action="store_true", help="a Markdown table")
    args = parser.parse_args(argv)
    mode = Mode(long=args.long)
    results: list[Figures] = []
    started = time.monotonic()
    with Clouds() as clouds:
        for name, scenario in SCENARIOS.items():
            if args.only not in name:
                continue
            print(f"running {name} ...", file=sys.stderr, flush=True)
            began = time.monotonic()
            figures = scenario(clouds, mode)
            figures.wall_seconds = time.monotonic() - began
            results.append(figures)
    total = time.monotonic() - started
    form = "long" if args.long else "short"
    print(f"Reliability suite ({form} form), {datetime.now(UTC):%Y-%m-%d}, {total:.0f} s:\n")
    print(table(results, markdown=args.markdown))
    failed = [(f.scenario, f.cloud, p) for f in results for p in f.problems()]
    for scenario, cloud, problem in failed:
        print(f"FAIL {cloud} {scenario}: {problem}")
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main())
