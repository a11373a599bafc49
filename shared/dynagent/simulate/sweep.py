"""``--sweep FIELD=V1,V2,...``: the same replay for each value of one pool field.

An admin picks a point from cost against wait (p50 and p95): a shorter
``max_idle_agent_period`` bills less idle time and makes more tasks wait for a boot;
more ``warm_headroom_slots`` bill free slots so that short tasks start at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from dynagent.core.config import ConfigError, Pool, Settings
from dynagent.core.field_names import close_name
from dynagent.simulate.replay import ProgressFactory, Replay, replay
from dynagent.simulate.report import format_wait
from dynagent.simulate.run import POLICIES, RunOptions
from dynagent.simulate.trace import Trace


@dataclass(frozen=True)
class SweepSpec:
    field: str
    values: tuple[str, ...]


def parse_sweep(text: str) -> SweepSpec:
    field, sep, values = text.partition("=")
    choices = tuple(v.strip() for v in values.split(",") if v.strip())
    if not sep or not field.strip() or not choices:
        raise ValueError(f"--sweep {text!r}: write it like max_idle_agent_period=1m,5m,10m")
    return SweepSpec(field.strip(), choices)


def pool_with(pool: Pool, field: str, value: str) -> Pool:
    """The pool with one provider field set to ``value``, checked as the config is; a
    nested field by its path (``warm_pool.max_stopped``)."""
    fields: dict[str, Any] = pool.provider.model_dump()
    *parents, name = field.split(".")
    level = fields
    for parent in parents:
        level = level[parent]
    level[name] = value
    try:
        return Pool.model_validate({"name": pool.name, "provider": fields})
    except ValidationError as error:
        problems = "; ".join(item["msg"].removeprefix("Value error, ") for item in error.errors())
        raise ConfigError(f"--sweep {field}={value}: {problems}") from None


def check_field(pool: Pool, field: str) -> None:
    """ConfigError unless ``field`` names a provider field, or one of a nested model's."""
    model: Any = type(pool.provider)
    for depth, name in enumerate(field.split(".")):
        fields = (
            model.model_fields if isinstance(model, type) and issubclass(model, BaseModel) else {}
        )
        if name not in fields:
            close = close_name(name, fields)
            said = f": did you mean {close}?" if close else ""
            where = "the pool's provider" if not depth else field.rsplit(".", 1)[0]
            raise ConfigError(f"--sweep: {field!r} is not a field of {where}{said}")
        model = fields[name].annotation
    if isinstance(model, type) and issubclass(model, BaseModel):
        raise ConfigError(f"--sweep: {field!r} is a section; name one of its fields")


def sweep(
    trace: Trace,
    pool: Pool,
    settings: Settings,
    spec: SweepSpec,
    policies: Sequence[str] = POLICIES,
    options: RunOptions | None = None,
    progress: ProgressFactory | None = None,
) -> list[tuple[str, Replay]]:
    """One replay per value, in the order given; every pool is checked before any runs."""
    check_field(pool, spec.field)
    pools = [(value, pool_with(pool, spec.field, value)) for value in spec.values]

    def labelled(value: str) -> ProgressFactory | None:
        if progress is None:
            return None
        return lambda name: progress(f"{name} {value}")

    return [
        (value, replay(trace, varied, settings, policies, options, labelled(value)))
        for value, varied in pools
    ]


def sweep_table(field: str, points: Sequence[tuple[str, Replay]]) -> str:
    """One row per value and policy; each column as wide as its widest cell, so waits of
    hundreds of hours stay apart."""
    rows = [[field, "policy", "cost", "GPU-h/limit", "wait p50", "wait p95", "wait mean"]]
    rows[0].append("waited")
    for value, result in points:
        for column in result.columns:
            if column.name == "limit":
                continue
            rows.append(
                [
                    value,
                    column.name,
                    f"${column.cost:,.0f}",
                    f"{column.vs_limit:.4f}",
                    format_wait(column.wait_p50),
                    format_wait(column.wait_p95),
                    format_wait(round(column.wait_mean or 0)),
                    f"{column.waited or 0:.1%}",
                ]
            )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    # The value and policy read left to right; the figures line up on the right.
    return "\n".join(
        "  ".join(
            cell.ljust(width) if i < 2 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    )
