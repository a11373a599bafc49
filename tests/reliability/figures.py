"""One scenario's figures, the targets they must meet, and the table they print as."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Mode:
    """How a scenario runs: the long form repeats more; ``inject=False`` leaves its faults
    out, which must make the scenario fail (tests/reliability/test_harness.py)."""

    long: bool = False
    inject: bool = True


@dataclass
class Figures:
    """What one scenario measured. Counts are summed over its runs."""

    scenario: str  # "R1 duplicates"
    cloud: str  # "aws" or "gcp"
    runs: int = 0
    launches_expected: int = 0
    launches_made: int = 0
    # Managed instances (or open spot requests) left over that the scenario's end state
    # says should not exist.
    leaked: int = 0
    # Busy or foreign instances terminated, relabelled or counted as the pool's.
    touched: int = 0
    # Records neither applied nor dead-lettered with a reason.
    lost: int = 0
    # Faults the doubles actually served (errors, duplicates, bad records, lag): a
    # scenario whose injection did nothing proves nothing, so 0 here fails it.
    faults: int = 0
    # The worst number of passes (reconciles and sweeps) until the fleet was right, and
    # the virtual or real seconds they spanned.
    converge_passes: int = 0
    converge_seconds: float = 0.0
    # Cloud API calls per minute of the scenario's clock, where a hot loop could show.
    calls_per_minute: float | None = None
    wall_seconds: float = 0.0
    # Anything else worth a column in docs/reliability.md (memory, pages, ...).
    extra: dict[str, Any] = field(default_factory=dict)
    # Limits a scenario sets for its own figures, e.g. {"calls_per_minute": 120}.
    limits: dict[str, float] = field(default_factory=dict)

    @property
    def extra_launches(self) -> int:
        return self.launches_made - self.launches_expected

    def problems(self) -> list[str]:
        """Every figure off its target; empty when the scenario passed."""
        found = []
        if self.runs <= 0:
            found.append("no run")
        if self.faults <= 0:
            found.append("no fault injected: the scenario proves nothing")
        if self.extra_launches != 0:
            found.append(f"launches: {self.launches_made} made, {self.launches_expected} expected")
        for name in ("leaked", "touched", "lost"):
            if getattr(self, name):
                found.append(f"{name}: {getattr(self, name)}")
        for name, limit in self.limits.items():
            value = getattr(self, name, None)
            if value is None:
                value = self.extra.get(name)
            if value is None or value > limit:
                found.append(f"{name}: {value} over its limit {limit}")
        return found


Scenario = Callable[[Any, Mode], Figures]

COLUMNS = (
    "scenario",
    "cloud",
    "runs",
    "launches (expected/made)",
    "leaked",
    "busy/foreign touched",
    "records lost",
    "faults served",
    "worst converge",
    "calls/min",
    "notes",
)


def row(figures: Figures) -> list[str]:
    notes = ", ".join(f"{k} {v}" for k, v in figures.extra.items())
    rate = figures.calls_per_minute
    return [
        figures.scenario,
        figures.cloud,
        str(figures.runs),
        f"{figures.launches_expected}/{figures.launches_made}",
        str(figures.leaked),
        str(figures.touched),
        str(figures.lost),
        str(figures.faults),
        f"{figures.converge_passes} passes, {figures.converge_seconds:.0f} s",
        "-" if rate is None else f"{rate:.0f}",
        notes or "-",
    ]


def table(results: Iterable[Figures], markdown: bool = False) -> str:
    """The figures as one table: Markdown for docs/reliability.md, aligned text otherwise."""
    rows = [list(COLUMNS)] + [row(f) for f in results]
    if markdown:
        lines = ["| " + " | ".join(r) + " |" for r in rows]
        lines.insert(1, "|" + "|".join("---" for _ in COLUMNS) + "|")
        return "\n".join(lines)
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)
