"""A replay as a person reads it (a table) and as a program does (a JSON document)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from dynagent.core.durations import format_duration
from dynagent.simulate.metrics import HOUR, Summary
from dynagent.simulate.replay import Replay

DAY = 86400


def _count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _gpus(count: int) -> str:
    return "1 GPU" if count == 1 else f"{count} GPUs"


def format_wait(value: int | None) -> str:
    return "-" if value is None else format_duration(timedelta(seconds=value))


# The table's rows: a label and how a column shows it.
ROWS: tuple[tuple[str, Callable[[Summary], str]], ...] = (
    ("billed instance-hours", lambda s: f"{s.instance_hours:,.1f}"),
    ("billed GPU-hours", lambda s: f"{s.gpu_hours:,.1f}"),
    ("  running tasks", lambda s: f"{s.busy_gpu_hours:,.1f}"),
    ("  free beside tasks", lambda s: f"{s.free_gpu_hours:,.1f}"),
    ("  on idle agents", lambda s: f"{s.idle_gpu_hours:,.1f}"),
    ("  booting", lambda s: f"{s.booting_gpu_hours:,.1f}"),
    ("cost", lambda s: f"${s.cost:,.0f}"),
    ("billed GPU-hours / limit", lambda s: f"{s.vs_limit:.4f}"),
    ("wait p50", lambda s: format_wait(s.wait_p50)),
    ("wait p95", lambda s: format_wait(s.wait_p95)),
    ("wait p99", lambda s: format_wait(s.wait_p99)),
    ("wait max", lambda s: format_wait(s.wait_max)),
    ("wait mean", lambda s: format_wait(None if s.wait_mean is None else round(s.wait_mean))),
    ("tasks that waited", lambda s: "-" if s.waited is None else f"{s.waited:.1%}"),
    ("pending at the cap", lambda s: format_wait(s.pending_at_max_seconds)),
    ("launches", lambda s: _count(s.launches)),
    ("  that never ran a task", lambda s: _count(s.unused_launches)),
    ("refused for capacity", lambda s: _count(s.refusals)),
    ("terminations", lambda s: _count(s.terminations)),
    ("tasks never scheduled", lambda s: _count(s.never_scheduled)),
    ("decisions", lambda s: _count(s.decisions)),
)
# Shown when spot machines are interrupted (--interruption-rate).
INTERRUPTION_ROWS: tuple[tuple[str, Callable[[Summary], str]], ...] = (
    ("spot interruptions", lambda s: _count(s.interruptions)),
    ("  tasks requeued", lambda s: _count(s.requeued)),
    (
        "  wait to restart, mean",
        lambda s: format_wait(None if s.restart_wait_mean is None else round(s.restart_wait_mean)),
    ),
    ("  wait to restart, max", lambda s: format_wait(s.restart_wait_max)),
)


# Shown when the pool keeps a warm pool of stopped machines.
WARM_POOL_ROWS: tuple[tuple[str, Callable[[Summary], str]], ...] = (
    ("stops", lambda s: _count(s.stops)),
    ("starts", lambda s: _count(s.starts)),
    ("  refused for capacity", lambda s: _count(s.start_refusals)),
    ("stopped machines, most", lambda s: _count(s.most_stopped)),
    ("  their disks' cost", lambda s: "-" if s.disk_cost is None else f"${s.disk_cost:,.2f}"),
)


# Shown when capacity is reserved (--reservation).
RESERVED_ROWS: tuple[tuple[str, Callable[[Summary], str]], ...] = (
    ("reserved place-hours", lambda s: _hours(s.reserved_hours)),
    ("  used", lambda s: _hours(s.reserved_used_hours)),
    (
        "  idle",
        lambda s: _hours(
            None
            if s.reserved_hours is None or s.reserved_used_hours is None
            else s.reserved_hours - s.reserved_used_hours
        ),
    ),
    ("  their cost", lambda s: "-" if s.reserved_cost is None else f"${s.reserved_cost:,.0f}"),
    ("bought beside a free place", lambda s: _count(s.on_demand_beside_free)),
)


# Shown when the pool is upgraded mid-trace (--upgrade-at).
UPGRADE_ROWS: tuple[tuple[str, Callable[[Summary], str]], ...] = (
    ("old config gone after", lambda s: _gone_after(s)),
    ("  tasks requeued since", lambda s: _count(s.requeued_since_upgrade)),
)


def _gone_after(column: Summary) -> str:
    if column.name == "limit":
        return "-"
    if column.upgraded_after is None:
        return "not by the end"
    return format_wait(column.upgraded_after)


def _hours(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def describe(replay: Replay) -> list[str]:
    """What was replayed, on what: the lines above the table."""
    trace, provider, options = replay.trace, replay.pool.provider, replay.options
    days = (trace.end - trace.start) / DAY
    boot = options.boot
    jitter = f" (± {boot.jitter}s, seed {boot.seed})" if boot.jitter else ""
    per_gpu = f" + {boot.per_gpu}s per GPU past the first" if boot.per_gpu else ""
    slots = sorted({shape.slots for shape in provider.catalog().shapes()})
    spread = "-".join(str(s) for s in (slots[0], slots[-1]) if s) if len(slots) > 1 else ""
    gpus = f"{spread} GPUs" if spread else ""
    headroom = provider.warm_headroom_slots
    cap, machines = provider.slot_cap, provider.machine_cap
    bounds = f"{provider.min_instances}..{provider.max_instances} instances"
    if cap is not None:
        bounds = f"up to {cap:,} GPUs" + (f" on {machines:,} machines" if machines else "")
    lines = [
        f"{trace.name}: {len(trace.jobs):,} jobs over {days:.1f} days, "
        f"{trace.busy_gpu_seconds / HOUR:,.0f} busy GPU-hours",
        f"pool {replay.pool.name}: {provider.shape}, "
        f"{gpus or _gpus(provider.slots_per_instance)} each, "
        f"{bounds}, idle {format_duration(provider.max_idle_agent_period)}, "
        f"starting {format_duration(provider.max_agent_starting_period)}"
        + (
            ", warm headroom sized from arrivals"
            if headroom == "auto"
            else f", warm headroom {headroom} slots"
            if headroom
            else ""
        ),
        f"boot: running after {boot.running_after}s, agent registered after "
        f"{boot.registered_after}s{per_gpu}{jitter}; heartbeat {options.heartbeat}s",
        *_warm_pool(replay),
        f"master: Determined's priority scheduler, no preemption, {options.fitting_policy} fit",
        "price per instance-hour: " + describe_prices(replay),
    ]
    if options.interruption_rate:
        lines.append(
            f"spot machines reclaimed at {options.interruption_rate:g} per machine-hour "
            f"(seed {boot.seed}), warned 2m ahead; their tasks resume from a checkpoint"
        )
    lines += [
        f"reserved: {r.count} x {r.instance_type} "
        + (
            "over the whole trace"
            if r.start is None and r.end is None
            else f"from {format_duration(timedelta(seconds=r.start or 0))}"
            + (f" to {format_duration(timedelta(seconds=r.end))}" if r.end is not None else "")
        )
        + ", billed whole at the on-demand price; determined buys beside it (pays twice)"
        for r in options.reservations
    ]
    lines += [
        f"no capacity for {o.instance_type}{f'@{o.zone}' if o.zone else ''} from "
        f"{format_duration(timedelta(seconds=o.start))} to "
        f"{format_duration(timedelta(seconds=o.end))}"
        for o in options.outages
    ]
    return lines


def _warm_pool(replay: Replay) -> list[str]:
    provider = replay.pool.provider
    warm = provider.warm_pool
    if not warm.enabled:
        return []
    return [
        "warm pool (dynagent): "
        + (
            "stopped ones kept until their disk bills what a start saves"
            if warm.auto
            else f"up to {warm.max_stopped} stopped"
        )
        + ", each at most "
        f"{format_duration(warm.max_stopped_period)}; a start registers after "
        f"{replay.options.boot.started_after}s; a stopped machine's disk "
        f"${provider.stopped_disk_per_hour:.3f}/h"
    ]


def describe_prices(replay: Replay) -> str:
    billed = replay.prices
    text = ", ".join(f"{t} ${price:,.2f}" for t, price in billed.by_type.items())
    if replay.pool.provider.offerings is not None:
        text += f"; determined runs {billed.baseline_type} at ${billed.baseline:,.2f}"
    return text


def table(replay: Replay) -> str:
    columns = replay.columns
    rows = ROWS + (INTERRUPTION_ROWS if replay.options.interruption_rate else ())
    rows += WARM_POOL_ROWS if replay.pool.provider.warm_pool.enabled else ()
    rows += RESERVED_ROWS if replay.options.reservations else ()
    rows += UPGRADE_ROWS if replay.options.upgrade_at is not None else ()
    width = max(len(label) for label, _ in rows) + 2
    lines = [*describe(replay), ""]
    lines.append(" " * width + "".join(f"{c.name:>14}" for c in columns))
    for label, show in rows:
        lines.append(f"{label:<{width}}" + "".join(f"{show(c):>14}" for c in columns))
    lines += ["", *launched_types(replay), *as_it_ran(replay), *footnotes(replay)]
    return "\n".join(lines)


def as_it_ran(replay: Replay) -> list[str]:
    """The GPU-hours the master's own agents of the replayed pool were up in the period,
    beside what each policy bills for the same work, where the trace says (dynagent trace)."""
    trace = replay.trace
    if len(trace.agents_up_gpu_hours) != 1:
        return []
    [(pool, up)] = trace.agents_up_gpu_hours.items()
    period = f" in its {trace.period_s / DAY:.1f} days" if trace.period_s else ""
    billed = ", ".join(f"{c.name} {c.gpu_hours:,.1f}" for c in replay.columns)
    lines = [
        f"As it ran: pool {pool}'s own agents were up {up:,.1f} GPU-hours{period} (the",
        f"master's records). Billed GPU-hours replayed: {billed}.",
    ]
    if up:
        ratios = ", ".join(f"{c.name} {c.gpu_hours / up:.3f}" for c in replay.columns)
        lines.append(f"Replayed ÷ as it ran: {ratios}.")
    return [*lines, ""]


def launched_types(replay: Replay) -> list[str]:
    """Which machine types each policy launched, when the pool has several."""
    if replay.pool.provider.offerings is None:
        return []
    lines = []
    for column in replay.columns:
        if column.launches_by_type:
            types = ", ".join(f"{t} {n:,}" for t, n in sorted(column.launches_by_type.items()))
            lines.append(f"{column.name} launched {types}")
    return [*lines, ""] if lines else []


def footnotes(replay: Replay) -> list[str]:
    notes = [
        "Cost is each instance's price per second of its life; GPU-hours count each",
        "instance's own GPUs. The limit pays the cheapest GPU-hour the pool can buy.",
        "Waits are start minus arrival, over the tasks that started; tasks never scheduled",
        "are left out of them and counted on their own row.",
        "The limit bills every GPU only while a task uses it: no boot, idle, fragmentation",
        "or waiting.",
    ]
    larger = replay.column("limit").larger_than_pool
    if larger:
        notes.append(
            f"{larger:,} task(s) can never run in this pool (larger than one machine, and "
            "not a multiple of a machine's GPUs within max_instances, or kept on one "
            "agent): left out of the limit too."
        )
    return notes


def document(replay: Replay) -> dict[str, Any]:
    """The JSON form of the table, with the inputs that produced it."""
    trace, provider, options = replay.trace, replay.pool.provider, replay.options
    return {
        "trace": {
            "name": trace.name,
            "jobs": len(trace.jobs),
            "days": round((trace.end - trace.start) / DAY, 2),
            "busy_gpu_hours": round(trace.busy_gpu_seconds / HOUR, 1),
        },
        "pool": {
            "name": replay.pool.name,
            "shape": provider.shape,
            "slots_per_instance": provider.slots_per_instance,
            "warm_headroom_slots": provider.warm_headroom_slots,
            "min_instances": provider.min_instances,
            "max_instances": provider.max_instances,
            "max_idle_agent_period_s": provider.max_idle_agent_period.total_seconds(),
            "max_agent_starting_period_s": provider.max_agent_starting_period.total_seconds(),
            "max_disconnected_period_s": provider.max_disconnected_period.total_seconds(),
        },
        "boot": dataclasses.asdict(options.boot),
        "heartbeat_s": options.heartbeat,
        "fitting_policy": options.fitting_policy,
        "interruption_rate_per_machine_hour": options.interruption_rate,
        "upgrade_at_s": options.upgrade_at,
        "price_per_instance_hour": replay.prices.by_type,
        "baseline": {"instance_type": replay.prices.baseline_type, "price": replay.prices.baseline},
        "unavailable": [dataclasses.asdict(outage) for outage in options.outages],
        "reservations": [dataclasses.asdict(r) for r in options.reservations],
        "as_it_ran": {
            "period_s": trace.period_s,
            "agents_up_gpu_hours": dict(trace.agents_up_gpu_hours),
        },
        "columns": {column.name: _column(column) for column in replay.columns},
        "wall_seconds": round(replay.wall_seconds, 2),
    }


def _column(summary: Summary) -> dict[str, Any]:
    fields = dataclasses.asdict(summary)
    del fields["name"]
    hours = ("instance_hours", "gpu_hours", "busy_gpu_hours", "free_gpu_hours")
    for key in (*hours, "idle_gpu_hours", "booting_gpu_hours"):
        fields[key] = round(fields[key], 3)
    fields["cost"] = round(fields["cost"], 2)
    if fields["disk_cost"] is not None:
        fields["disk_cost"] = round(fields["disk_cost"], 2)
    fields["vs_limit"] = round(fields["vs_limit"], 5)
    for key in ("wait_mean", "waited", "restart_wait_mean"):
        if fields[key] is not None:
            fields[key] = round(fields[key], 4)
    return fields
