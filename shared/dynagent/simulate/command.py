"""``dynagent simulate``: replay a job trace through the decision core, and report.

Kept apart from ``dynagent.cli.main`` so the command's options live beside what they drive;
``cli`` only registers it. The simulator is imported when the command runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any, TextIO

from dynagent.core.config import Config, Pool, parse_config
from dynagent.core.durations import parse_duration
from dynagent.files.config import load_config

if TYPE_CHECKING:
    from dynagent.simulate.replay import ProgressFactory
    from dynagent.simulate.run import RunOptions
    from dynagent.simulate.trace import Trace

# With no --config: 8-GPU instances (p4d.24xlarge), Determined's defaults otherwise, and
# room for the largest shared trace's peak (about 2,000 GPUs busy at once).
DEFAULT_POOL_YAML = """
resource_pools:
  - pool_name: default
    provider:
      type: aws
      region: us-east-1
      image_id: ami-00000000000000000
      instance_type: p4d.24xlarge
      max_instances: 1000
"""


def add_parser(commands: Any) -> None:
    """Register ``simulate`` on the ``dynagent`` command's subparsers."""
    simulate = commands.add_parser(
        "simulate",
        help="replay a job trace: cost and waits under dynagent and Determined's provisioner",
        description="Replay a job trace CSV through dynagent's decision and a Determined-style "
        "baseline on a simulated cloud, beside the physical limit.",
    )
    simulate.add_argument(
        "trace",
        help="CSV: job_id,submission_time,duration,num_gpu or "
        "arrival_s,duration_s,gpus[,priority][,single_agent]",
    )
    simulate.add_argument("--config", help="pool YAML (default: 8-GPU p4d.24xlarge, max 1000)")
    simulate.add_argument(
        "--pool",
        help="pool name (default: the config's only pool); of a trace with a pool column, "
        "only this pool's jobs are replayed",
    )
    simulate.add_argument("--json", metavar="OUT.json", help="write the figures as JSON")
    simulate.add_argument("--plot", metavar="OUT.html", help="write a plot: .html or .svg")
    simulate.add_argument(
        "--price",
        type=float,
        default=None,
        metavar="DOLLARS",
        help="per instance-hour, for a pool of one instance type (default: its built-in "
        "list price; a pool with offerings takes its prices from them)",
    )
    simulate.add_argument(
        "--unavailable",
        action="append",
        default=[],
        metavar="TYPE[@ZONE]=START-END",
        help="no capacity for that offering from START to END after the trace's start, "
        "e.g. p3.2xlarge=2h-5h (repeatable)",
    )
    simulate.add_argument(
        "--reservation",
        action="append",
        default=[],
        metavar="TYPE=COUNT[@START-END]",
        help="capacity reserved ahead, billed whole whether used or not: COUNT machines of "
        "TYPE over the whole trace, or from START to END after its start, e.g. "
        "p4d.24xlarge=10 or p4d.24xlarge=10@2d-5d (repeatable)",
    )
    duration = {"metavar": "DURATION"}
    simulate.add_argument(
        "--running-after", default="60s", help="an instance shows running (60s)", **duration
    )
    simulate.add_argument(
        "--registered-after",
        default="360s",
        help="its agent registers, on a 1-GPU machine, images pulled (360s)",
        **duration,
    )
    simulate.add_argument(
        "--started-after",
        default="90s",
        help="a stopped machine of a warm pool, started, registers its agent: no image pull (90s)",
        **duration,
    )
    simulate.add_argument(
        "--boot-per-gpu",
        default="3s",
        help="each GPU past the first adds this to the registration (3s)",
        **duration,
    )
    simulate.add_argument(
        "--boot-jitter",
        default="20s",
        help="each boot time varies by up to this, seeded (20s; 0s and --boot-per-gpu 0s: "
        "every boot alike)",
        **duration,
    )
    simulate.add_argument(
        "--seed", type=int, default=0, help="seed of the boot jitter and interruptions (0)"
    )
    simulate.add_argument(
        "--interruption-rate",
        type=float,
        default=0.0,
        metavar="R",
        help="spot machines reclaimed per machine-hour, warned 2m ahead (0: never); the "
        "pool must buy spot (spot: true, or spot in offerings.purchase)",
    )
    simulate.add_argument(
        "--upgrade-at",
        metavar="DURATION",
        help="the pool moves to a new agent image this long after the trace's start (an "
        "upgrade of Determined): the report says how long until no machine of the old one "
        "is left, and the tasks requeued since",
    )
    simulate.add_argument(
        "--heartbeat",
        default="30s",
        help="the bridge's snapshot interval when nothing changes (30s), published at its "
        "next 5 s read of the master",
        **duration,
    )
    simulate.add_argument(
        "--fitting-policy",
        choices=("best", "worst"),
        default="best",
        help="how the master fits a task on its agents, as Determined's fitting_policy: "
        "best (the fewest free slots left; the default) or worst (the largest share free)",
    )
    simulate.add_argument(
        "--policy",
        action="append",
        choices=("dynagent", "determined"),
        help="policy to run (repeatable; default: both)",
    )
    simulate.add_argument(
        "--sweep", metavar="FIELD=V1,V2", help="one replay per value of a pool field"
    )
    simulate.add_argument(
        "--exhaustive",
        action="store_true",
        help="deliver every heartbeat, sweep and tick (slow; checks the fast path)",
    )
    simulate.add_argument("--no-progress", action="store_true", help="no progress bar")
    simulate.set_defaults(run=run)


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from dynagent.simulate.plot import check_plot_path
    from dynagent.simulate.run import POLICIES
    from dynagent.simulate.trace import load_trace

    out = out or sys.stdout
    if args.plot:
        check_plot_path(args.plot)
    config = (
        load_config(args.config)
        if args.config
        else parse_config(DEFAULT_POOL_YAML, environ=os.environ)
    )
    pool = _pool(config, args.pool)
    trace = pool_jobs(load_trace(args.trace), pool.name, args.pool is not None, out)
    common = {
        "policies": tuple(args.policy or POLICIES),
        "options": run_options(args),
        "progress": _progress(args),
    }
    if args.sweep:
        _sweep(args, trace, pool, config, common, out)
    else:
        _replay(args, trace, pool, config, common, out)
    return 0


def _replay(
    args: argparse.Namespace,
    trace: Trace,
    pool: Pool,
    config: Config,
    common: dict[str, Any],
    out: TextIO,
) -> None:
    from dynagent.simulate.plot import timeline_charts, write_plot
    from dynagent.simulate.replay import replay
    from dynagent.simulate.report import document, table

    result = replay(trace, pool, config.settings, **common)
    text = table(result)
    print(text, file=out)
    print(f"replayed in {result.wall_seconds:.1f} s", file=out)
    if args.json:
        _write_json(args.json, document(result), out)
    if args.plot:
        title = f"dynagent simulate: {trace.name}"
        write_plot(args.plot, title, timeline_charts(result), text)
        print(f"wrote {args.plot}", file=out)


def _sweep(
    args: argparse.Namespace,
    trace: Trace,
    pool: Pool,
    config: Config,
    common: dict[str, Any],
    out: TextIO,
) -> None:
    from dynagent.simulate.plot import sweep_charts, write_plot
    from dynagent.simulate.report import document
    from dynagent.simulate.sweep import parse_sweep, sweep, sweep_table

    spec = parse_sweep(args.sweep)
    points = sweep(trace, pool, config.settings, spec, **common)
    text = sweep_table(spec.field, points)
    print(text, file=out)
    if args.json:
        body = {
            "sweep": {"field": spec.field, "values": list(spec.values)},
            "points": [{"value": value, **document(result)} for value, result in points],
        }
        _write_json(args.json, body, out)
    if args.plot:
        title = f"dynagent simulate: {trace.name}, sweep of {spec.field}"
        write_plot(args.plot, title, sweep_charts(spec.field, points), text)
        print(f"wrote {args.plot}", file=out)


def pool_jobs(trace: Trace, pool: str, named: bool, out: TextIO) -> Trace:
    """The jobs to replay in ``pool``: of a trace that names pools (dynagent trace writes
    one per pool of the master), the rows of that pool. With no --pool and a trace of one
    pool, that pool's rows, whatever the config calls its pool."""
    pools = trace.pools
    if not pools:
        return trace
    if pool not in pools and not named and len(pools) == 1:
        print(f"replaying pool {pools[0]}'s jobs of {trace.name} in pool {pool}", file=out)
        return trace.of_pool(pools[0])
    if pool not in pools:
        raise ValueError(
            f"trace {trace.name} has no jobs of pool {pool!r}; its pools: {', '.join(pools)}: "
            "give --pool and a --config that has that pool"
        )
    chosen = trace.of_pool(pool)
    left_out = len(trace.jobs) - len(chosen.jobs)
    if left_out:
        others = ", ".join(name for name in pools if name != pool)
        print(
            f"replaying the {len(chosen.jobs)} jobs of pool {pool}; left out {left_out} jobs "
            f"of other pools ({others})",
            file=out,
        )
    return chosen


def _pool(config: Config, name: str | None) -> Pool:
    if name is None and len(config.pools) != 1:
        raise ValueError(f"--pool is required: the config has {', '.join(config.pools)}")
    return config.pool(name or next(iter(config.pools)))


def run_options(args: argparse.Namespace) -> RunOptions:
    from dynagent.simulate.boot import BootModel
    from dynagent.simulate.capacity import parse_outage
    from dynagent.simulate.reservations import parse_reservation
    from dynagent.simulate.run import RunOptions

    boot = BootModel(
        running_after=_seconds(args.running_after, "--running-after"),
        registered_after=_seconds(args.registered_after, "--registered-after"),
        started_after=_seconds(args.started_after, "--started-after"),
        jitter=_seconds(args.boot_jitter, "--boot-jitter"),
        seed=args.seed,
        per_gpu=_seconds(args.boot_per_gpu, "--boot-per-gpu"),
    )
    heartbeat = _seconds(args.heartbeat, "--heartbeat")
    if heartbeat <= 0:
        raise ValueError("--heartbeat must be at least 1s")
    return RunOptions(
        boot=boot,
        heartbeat=heartbeat,
        exhaustive=args.exhaustive,
        outages=tuple(parse_outage(text) for text in args.unavailable),
        reservations=tuple(parse_reservation(text) for text in args.reservation),
        price=args.price,
        interruption_rate=args.interruption_rate,
        fitting_policy=args.fitting_policy,
        upgrade_at=None if args.upgrade_at is None else _seconds(args.upgrade_at, "--upgrade-at"),
    )


def _seconds(text: str, flag: str) -> int:
    """Whole seconds of a flag's duration; a ValueError that names the flag."""
    try:
        return round(parse_duration(text).total_seconds())
    except ValueError as error:
        raise ValueError(f"{flag}: {error}") from None


def _progress(args: argparse.Namespace) -> ProgressFactory | None:
    """A bar per policy run on stderr, when it is a terminal and not turned off."""
    from dynagent.simulate.progress import ProgressBar

    if args.no_progress or not sys.stderr.isatty():
        return None
    return lambda label: ProgressBar(sys.stderr, label)


def _write_json(path: str, body: dict[str, Any], out: TextIO) -> None:
    with open(path, "w") as handle:
        json.dump(body, handle, indent=2)
        handle.write("\n")
    print(f"wrote {path}", file=out)
