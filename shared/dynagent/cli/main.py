"""The ``dynagent`` command: its parser, and the subcommands too small for a module."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from datetime import timedelta
from importlib.metadata import PackageNotFoundError, version

from dynagent.bridge import command as bridge_command
from dynagent.bridge import trace as trace_command
from dynagent.cli import plan_command, status_command
from dynagent.cli.doctor import command as doctor_command
from dynagent.cli.errors import explain, reaching
from dynagent.core.boot.master import master_address
from dynagent.core.config import AwsProvider, Config, ProviderConfig
from dynagent.core.decide.cap_fill import FILL_WITHIN, fill_shapes
from dynagent.core.decide.expected_work import BOOT_SECONDS, QUANTILE, START_SECONDS
from dynagent.core.decide.warm_pool_size import kept_for
from dynagent.core.durations import format_duration
from dynagent.core.offerings import Catalog
from dynagent.core.prices import AWS_PRICES_REGION, GCE_PRICES_REGION
from dynagent.core.snapshot import InvalidSnapshot, Snapshot, parse_snapshot
from dynagent.files.config import load_config
from dynagent.files.config_argument import add_config, chosen_config
from dynagent.files.snapshot import load_snapshot
from dynagent.simulate import command as simulate_command

DESCRIPTION = (
    "dynagent scales Determined AI's GPU agents from serverless functions: the master's "
    "pool snapshots in, a right-sized fleet out. These commands check a pool config, "
    "preview and inspect what the functions do, replay a job trace, and bridge a master "
    "to the functions."
)
EPILOG = "Run 'dynagent COMMAND --help' for the options of a command."


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return int(args.run(args))
    except Exception as error:
        explained = explain(error)
        if explained is None:
            raise  # a bug: its traceback is what a report needs
        message, code = explained
        print(f"dynagent: {message}", file=sys.stderr)
        return code


class _HelpFormatter(argparse.HelpFormatter):
    """Shows each option's default, unless its help already says it or there is none."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        # Identity, not equality: a default of 0 is worth showing, and 0 == False.
        unset = any(default is nothing for nothing in (None, False, argparse.SUPPRESS))
        unset = unset or default == []
        said = "default" in text or f"({default}" in text
        if unset or said or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dynagent", description=DESCRIPTION, epilog=EPILOG, formatter_class=_HelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"dynagent {_version()}")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    validate = commands.add_parser(
        "validate",
        help="check a pool config file",
        description="Load a pool config with the functions' own checks and summarise each "
        "pool: its machines and slots, bounds and periods, what it may buy at what price, "
        "and what deserves a second look. An error names the pool and field.",
    )
    add_config(validate, "YAML with resource_pools (Determined master.yaml form)")
    validate.set_defaults(run=_validate)

    master = commands.add_parser(
        "master-config",
        help="the master.yaml resource_pools that let the master admit work for these pools",
        description="Print the resource_pools for the Determined master's master.yaml: each "
        "pool dynagent scales gets a provider for admission only (the slots of its largest "
        "machine, its max_instances) that the master's provisioner can never act on.",
    )
    add_config(master, "dynagent's pool config")
    master.set_defaults(run=_master_config)

    publish = commands.add_parser(
        "publish",
        help="send a snapshot to the autoscaler's queue",
        description="Send one pool snapshot (the JSON the bridge publishes) to the "
        "functions' SQS FIFO queue or Pub/Sub topic, with the credentials of that cloud.",
    )
    publish.add_argument("snapshot", nargs="?", default="-", help="JSON file, or - for stdin")
    publish.add_argument(
        "--to",
        required=True,
        metavar="DESTINATION",
        help="SQS FIFO queue URL, or Pub/Sub topic projects/PROJECT/topics/NAME",
    )
    publish.add_argument("--region", help="the queue's region, if its URL does not say")
    publish.set_defaults(run=_publish)

    plan_command.add_parser(commands)

    demo = commands.add_parser(
        "demo",
        help="a scripted day of a master, on a local cloud",
        description="Run a scripted day of a Determined master's pool against local clouds "
        "on this machine (nothing real is touched), and print what the functions did.",
    )
    demo.add_argument("--quiet", action="store_true", help="only the final fleet table")
    demo.add_argument(
        "--cloud",
        choices=("aws", "gcp"),
        default="aws",
        help="aws: moto on loopback; gcp: a local Compute Engine and the Pub/Sub emulator",
    )
    demo.set_defaults(run=_demo)

    status_command.add_parser(commands)
    simulate_command.add_parser(commands)
    trace_command.add_parser(commands)
    bridge_command.add_parser(commands)
    doctor_command.add_parser(commands)
    # Subcommands registered elsewhere show their defaults the same way.
    for command in commands.choices.values():
        command.formatter_class = _HelpFormatter
    return parser


def subcommands() -> dict[str, argparse.ArgumentParser]:
    """Each subcommand's parser, by name."""
    for action in _parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _version() -> str:
    try:
        return version("dynagent")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "(not installed)"


def _validate(args: argparse.Namespace) -> int:
    config = load_config(chosen_config(args))
    for line in describe_config(config):
        print(line)
    return 0


def _master_config(args: argparse.Namespace) -> int:
    from dynagent.files.master_config import master_config

    print(master_config(chosen_config(args)), end="")
    return 0


def describe_config(config: Config) -> list[str]:
    lines = []
    for pool in config.pools.values():
        p = pool.provider
        slots = _count(p.slots_per_instance, "slot")
        # A pool with offerings counts no machines unless offerings.max_machines says so.
        size = (
            f"up to {slots} a machine, at least {p.min_instances} instances"
            if p.offerings is not None
            else f"{slots} each, {p.min_instances}..{p.max_instances} instances"
        )
        lines.append(
            f"pool {pool.name}: {p.type} {p.shape}, {size}, "
            f"idle {format_duration(p.max_idle_agent_period)}, "
            f"starting {format_duration(p.max_agent_starting_period)}, "
            f"disconnected {format_duration(p.max_disconnected_period)}"
            + (", spot" if p.spot else "")
        )
        lines.append(f"  caps: {_caps(p)}")
        cap = p.slot_cap
        if (
            cap
            and p.offerings is not None
            and p.fill_near_cap
            and fill_shapes(p.catalog().shapes())
        ):
            near = math.ceil(FILL_WITHIN * cap)
            lines.append(
                f"  near the cap: a pass that launches with fewer than {near} slots left "
                f"({FILL_WITHIN:.0%} of {cap}) launches the rest too, the cheapest "
                "per GPU, reaped when idle (fill_near_cap)"
            )
        if p.offerings is not None:
            lines += [f"  offers {line}" for line in _offerings(p.catalog())]
            lines += [f"  {note}" for note in _price_source(p)]
        if p.headroom_slots:
            free = _count(p.headroom_slots, "free slot")
            lines.append(f"  keeps {free} warm on its smallest shape")
        if p.headroom_auto:
            lines.append(
                "  warm headroom (auto): keeps free room for the tasks that came, in the "
                f"last hour, within one {'start' if p.warm_pool.enabled else 'boot'} "
                f"({START_SECONDS if p.warm_pool.enabled else BOOT_SECONDS} s) before "
                f"{QUANTILE:.0%} of its arrivals; for tasks of a whole largest machine "
                "only idle machines are kept, none launched; nothing while no task came "
                "for an hour; within the caps"
            )
        if p.warm_pool.enabled:
            warm = p.warm_pool
            period = format_duration(warm.max_stopped_period)
            disk = p.stopped_disk_per_hour
            if warm.auto:
                kept = (
                    "each kept until its disk has billed what a start of it saves over a "
                    f"launch (auto: {_break_even(p)}), at most {period}"
                )
                bill = "a day each"
                per_day = disk * 24
            else:
                count = _count(warm.stopped_limit, "stopped machine")
                kept = f"up to {count}, each kept {period} at most"
                bill = "a day for all"
                per_day = disk * warm.stopped_limit * 24
            lines.append(
                f"  warm pool: idle agents are stopped, not terminated, {kept}; new work "
                "starts them before launching (a start skips the boot's image pull); a "
                f"stopped machine bills its disk, ${disk:.3f}/h, ${per_day:.2f} {bill}"
            )
        if p.reservations:
            lines.append(
                f"  reservations: {', '.join(p.reservations)}: pending work goes into their "
                "free places first while they are active, and their idle agents are kept; "
                f"from {format_duration(p.drain_before_reservation_end)} before a Capacity "
                "Block's end (drain_before_reservation_end) its machines count as going and "
                "queued work gets machines elsewhere; `dynagent doctor` says what each one is"
            )
        lines += [f"  warning: {warning}" for warning in p.warnings()]
        master = master_address(p.master_url)
        if master.needs_resolving:
            said = f"names {master.host}" if master.host else "has no host"
            lines.append(
                f"  master_url {said} (the master's own address): run `dynagent bridge "
                "--master-host ec2` (or gce) on the master's host; it publishes the address"
            )
        elif master.host in ("127.0.0.1", "localhost", "::1"):
            lines.append(
                f"  master_url {p.master_url} is loopback: agents on other machines cannot "
                "reach it; write the master's address, or http://local-ipv4:8080 (Determined's "
                "way) with the bridge on the master's host"
            )
    lines += [
        f"pool {name}: not autoscaled (no aws or gcp provider), left to the master"
        for name in config.static_pools
    ]
    return lines


def _caps(p: ProviderConfig) -> str:
    """The caps the pool derived, in slots (GPUs) and in machines, and where from."""
    machines, cap = p.machine_cap, p.slot_cap
    if p.offerings is None or cap is None:
        each, count = p.slots_per_instance, p.max_instances
        total = _count(count * each, "slot")
        return f"{_count(count, 'machine')} (max_instances) of {_count(each, 'slot')}: {total}"
    if p.offerings.max_slots is not None:
        source = "offerings.max_slots"
    else:
        each = cap // p.max_instances if p.max_instances else 0
        source = f"max_instances {p.max_instances} x the {each} of instance_type"
    limit = (
        f"at most {_count(machines, 'machine')} (offerings.max_machines)"
        if machines is not None
        else "machines of any size within it"
    )
    return f"{_count(cap, 'slot')} ({source}), {limit}"


def _offerings(catalog: Catalog) -> list[str]:
    """One line per machine type: slots, and where and how it is bought, in order."""
    lines: dict[str, list[str]] = {}
    for offering in catalog.offerings:
        where = f"{offering.purchase.value}" + (f" in {offering.zone}" if offering.zone else "")
        lines.setdefault(f"{offering.instance_type} ({_count(offering.slots, 'slot')})", []).append(
            f"{where} ${offering.price:.2f}/h"
        )
    return [f"{shape}: {', '.join(ways)}" for shape, ways in lines.items()]


def _break_even(provider: ProviderConfig) -> str:
    """How long a stopped machine of each offered type is kept with ``auto``."""
    catalog = provider.catalog()
    times: dict[str, timedelta] = {}
    for offering in catalog.offerings:
        times.setdefault(offering.instance_type, kept_for(provider, offering.price))
    return ", ".join(f"{name} {format_duration(kept)}" for name, kept in times.items())


def _count(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _price_source(provider: ProviderConfig) -> list[str]:
    """Where the prices shown come from, when dynagent's list prices stand in for the
    pool's own: they are one region's, which may not be the pool's."""
    if isinstance(provider, AwsProvider):
        region, listed = provider.region, AWS_PRICES_REGION
    else:
        region, listed = provider.zone.rsplit("-", 1)[0], GCE_PRICES_REGION
    given = provider.offerings.prices if provider.offerings else {}
    types = list(dict.fromkeys(o.instance_type for o in provider.catalog().offerings))
    built_in = [t for t in types if t not in given]
    if not built_in:
        return []
    which = "prices" if built_in == types else f"prices of {', '.join(built_in)}"
    if region == listed:
        return [f"{which}: dynagent's {listed} on-demand list prices"]
    return [
        f"{which}: dynagent's {listed} on-demand list prices, not {region}'s; set "
        "offerings.prices to the pool's own"
    ]


def _read_snapshot(source: str) -> Snapshot:
    """A snapshot file, or stdin for ``-``; errors name where it came from."""
    if source != "-":
        return load_snapshot(source)
    try:
        return parse_snapshot(sys.stdin.read())
    except InvalidSnapshot as error:
        raise InvalidSnapshot(f"stdin: {error}") from None


def _publish(args: argparse.Namespace) -> int:
    from dynagent.bridge.publish import publisher_for

    snapshot = _read_snapshot(args.snapshot)
    kind = "topic" if args.to.startswith("projects/") else "queue"
    with reaching(f"{kind} {args.to}"):
        message_id = publisher_for(args.to, args.region).publish(snapshot)
    print(f"published {snapshot.dedup_id} as message {message_id}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from dynagent.demo import run_demo

    return run_demo(quiet=args.quiet, cloud=args.cloud)


if __name__ == "__main__":
    raise SystemExit(main())
