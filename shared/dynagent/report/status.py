"""``dynagent status``: one pool as the cloud shows it, beside the last snapshot applied.

The functions keep no database, so what the status needs of the master's side lives
in a ``Summary`` of the last applied snapshot, which the reconcile function records on
the snapshot queue (SQS tags) or topic (Pub/Sub labels) after each applied snapshot.
Everything else is read from the cloud, through the same adapters the functions use.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from dynagent.core.boot.drift import boot_config_and_parts, drift_of
from dynagent.core.config import Pool, Settings
from dynagent.core.decide import decide
from dynagent.core.durations import format_duration
from dynagent.core.fleet import Fleet, Instance, InstanceState, RequestState
from dynagent.core.reservations import machines_in_each
from dynagent.core.snapshot import Snapshot

# An unchanged summary is written again after this long, so its time says the master
# still publishes; a status reader may call a summary older than twice this stale.
REFRESH = timedelta(minutes=5)


@dataclass(frozen=True)
class Summary:
    """What the status shows of the last snapshot a reconcile applied to a pool."""

    seq: int
    time: datetime
    pending: int
    pending_slots: int
    agents: int
    busy: int
    idle: int
    draining: int
    # The last launch the cloud refused, and when (kept until a newer refusal).
    launch_error: str | None = None
    launch_error_at: datetime | None = None
    # Until when launches were paused (launch_error_timeout/retries), if they were.
    launches_paused_until: datetime | None = None
    # Agents the pass found of an old boot config, or broken, and replaces.
    drifted: int = 0
    broken: int = 0

    @classmethod
    def of(cls, snapshot: Snapshot) -> Summary:
        agents = snapshot.agents
        return cls(
            seq=snapshot.seq,
            time=snapshot.time,
            pending=len(snapshot.pending),
            pending_slots=sum(task.slots for task in snapshot.pending),
            agents=len(agents),
            busy=sum(1 for a in agents if not a.idle),
            idle=sum(1 for a in agents if a.idle),
            draining=sum(1 for a in agents if a.draining),
        )

    def same_state(self, other: Summary | None) -> bool:
        """Equal but for seq and time: writing it again would tell nothing new."""
        if other is None:
            return False
        return replace(self, seq=other.seq, time=other.time) == other


class SummaryRecorder:
    """Records each pool's summary after an applied snapshot: at most one write each,
    none when nothing changed (and the last write is younger than REFRESH).

    ``write(pool, summary)`` is the cloud's store. A failure to record is logged and
    swallowed: the status is for people, the reconcile must not fail for it.
    """

    def __init__(self, write: Any, logger: Any) -> None:
        self._write = write
        self._logger = logger
        # What this warm function last recorded per pool; a cold start writes once.
        self._last: dict[str, Summary] = {}

    def record(
        self,
        snapshot: Snapshot,
        launch_error: str | None,
        now: datetime,
        paused_until: datetime | None = None,
        replacing: tuple[int, int] = (0, 0),
    ) -> None:
        """``replacing``: (drifted, broken) agents the pass found (``Plan.replacing_counts``)."""
        previous = self._last.get(snapshot.pool)
        drifted, broken = replacing
        summary = replace(
            Summary.of(snapshot),
            launches_paused_until=paused_until,
            drifted=drifted,
            broken=broken,
        )
        if launch_error:
            summary = replace(summary, launch_error=launch_error, launch_error_at=now)
        elif previous is not None:
            summary = replace(
                summary,
                launch_error=previous.launch_error,
                launch_error_at=previous.launch_error_at,
            )
        if (
            previous is not None
            and summary.same_state(previous)
            and now - previous.time < REFRESH
            and summary.seq >= previous.seq
        ):
            return
        try:
            self._write(snapshot.pool, summary, new_error=bool(launch_error))
        except Exception as error:
            self._logger.warning(
                "could not record the pool's status summary (the reconcile went on)",
                extra={"pool": snapshot.pool, "error": f"{type(error).__name__}: {error}"},
            )
            return
        self._last[snapshot.pool] = summary


# --- What the status shows --------------------------------------------------------


def instance_state(instance: Instance) -> str:
    """The instance as the pool sees it: starting, busy, idle, disconnected, ..."""
    if instance.state is InstanceState.STARTING:
        return "starting"
    if instance.state is not InstanceState.RUNNING:
        return str(instance.state.value)
    if instance.disconnected_since is not None:
        return "disconnected"
    if instance.registered_at is None:
        return "unregistered"  # running, its agent not seen yet
    return "idle" if instance.idle_since is not None else "busy"


STATE_ORDER = ("starting", "unregistered", "busy", "idle", "disconnected", "stopping", "stopped")
_STOPPED = (InstanceState.STOPPED, InstanceState.STOPPING)


def pool_status(
    pool: Pool,
    fleet: Fleet,
    summary: Summary | None,
    now: datetime,
    settings: Settings | None = None,
    unread: str | None = None,
) -> dict[str, Any]:
    """A JSON-ready view of one pool; ``render`` prints it. ``unread`` says why no summary
    was read at all, and how to read one (None: it was looked for).

    The plan is what the next pass would do without a snapshot (as the sweep decides):
    a summary holds counts, not the agents a reconcile matches instances with, and a
    snapshot made up from it would mark every registered agent disconnected.
    """
    provider = pool.provider
    instances = []
    counts: dict[str, int] = {}
    # The pool's boot config now, as far as the status can tell: with master_url an
    # alias it knows no address, and judges nothing.
    config_now, parts_now = boot_config_and_parts(pool, {})
    for instance in sorted(fleet.instances, key=lambda i: (i.launched_at, i.id)):
        state = instance_state(instance)
        counts[state] = counts.get(state, 0) + 1
        instances.append(
            {
                "id": instance.id,
                "state": state,
                "type": instance.instance_type or provider.shape,
                "spot": instance.spot,
                "age_s": _seconds(now - instance.launched_at),
                "registered_at": _iso(instance.registered_at),
                "idle_s": _since(instance.idle_since, now),
                "disconnected_s": _since(instance.disconnected_since, now),
                # Since a pass stopped it for the warm pool (None: not recorded).
                "stopped_s": _since(instance.stopped_at, now),
                # What changed since its launch, when its boot config is not the pool's
                # now (``core.boot.drift``); None when it is, or cannot be told.
                "drifted": drift_of(
                    instance.boot_config, instance.boot_parts, config_now, parts_now
                ),
            }
        )
    requests = [
        {
            "id": request.id,
            "state": request.state.value,
            "status": request.status_code,
            "age_s": _seconds(now - request.created_at),
            "instance_id": request.instance_id,
        }
        for request in fleet.spot_requests
    ]
    live = sum(1 for i in fleet.instances if i.live)
    requests_open = sum(1 for r in fleet.spot_requests if r.state is RequestState.OPEN)
    live += requests_open
    # A pool with offerings is capped in slots (and in machines only where it says so).
    catalog, each = provider.catalog(), provider.slots_per_instance
    slots = requests_open * each + sum(
        catalog.slots_of(i.instance_type, each) for i in fleet.instances if i.live
    )
    machines, slot_cap = provider.machine_cap, provider.slot_cap
    at_max = (machines is not None and live >= machines) or (
        slot_cap is not None and slots >= slot_cap
    )
    plan = decide(pool, fleet, None, now, settings)
    in_each = machines_in_each(fleet.instances)
    # Stopped or stopping, they bill their disks (whether kept by a warm pool or not).
    stopped = sum(1 for i in fleet.instances if i.state in _STOPPED)
    last: dict[str, Any] | None = None
    if summary is not None:
        last = asdict(summary)
        last["time"] = _iso(summary.time)
        last["age_s"] = _seconds(now - summary.time)
        last["launch_error_at"] = _iso(summary.launch_error_at)
        paused = summary.launches_paused_until
        last["launches_paused_until"] = _iso(paused) if paused and paused > now else None
        last["stale"] = now - summary.time > 2 * REFRESH
    return {
        "pool": pool.name,
        "cloud": provider.type,
        "now": _iso(now),
        "instances": instances,
        "counts": {state: counts[state] for state in STATE_ORDER if state in counts},
        "spot_requests": requests,
        "live": live,
        "min_instances": provider.min_instances,
        "max_instances": provider.max_instances,
        "slots": slots,
        "max_slots": slot_cap,
        "max_machines": machines,
        "at_max": at_max,
        "stopped": {
            "machines": stopped,
            "disk_per_hour": round(stopped * provider.stopped_disk_per_hour, 4),
        },
        "reservations": [
            {
                "id": r.id,
                "kind": r.kind.value,
                "type": r.instance_type,
                "zone": r.place or r.zone,
                "total": r.total,
                "free": r.available,
                "pool_machines": in_each.get(r.id, 0),
                "starts_at": _iso(r.starts_at),
                "ends_at": _iso(r.ends_at),
                "usable": r.usable(now, provider.drain_before_reservation_end),
                "about": r.describe(now),
            }
            for r in fleet.reservations
        ],
        "last_snapshot": last,
        "last_snapshot_unread": unread if summary is None else None,
        "plan": {"basis": "no snapshot (as the next sweep)", "actions": plan.describe()},
    }


def _replacing(drifted: int, broken: int) -> str:
    """What the last pass replaces, for the last snapshot's line: "" when nothing."""
    kinds = [f"{drifted} of an old config" if drifted else "", f"{broken} broken" if broken else ""]
    named = " and ".join(kind for kind in kinds if kind)
    return f"; replacing {named}" if named else ""


def render(status: dict[str, Any], styled: bool = False) -> list[str]:
    """Aligned plain text for a pipe; ``styled`` (a terminal): boxed tables, bold
    headers, states in colour."""
    counts = ", ".join(f"{n} {state}" for state, n in status["counts"].items())
    bound = " (at max)" if status["at_max"] else ""
    title = f"pool {status['pool']} ({status['cloud']})"
    if styled:
        title = _paint(title, _BOLD)
        bound = _paint(bound, _COLOURS["stopped"]) if bound else ""
    size = f"{status['live']} of max {status['max_instances']} instances"
    if not status["live"]:
        size = f"no instances (max {status['max_instances']})"
    if status.get("max_slots") is not None:
        machines = status["max_machines"]
        size = (
            f"{status['live']} instances"
            + (f" of max {machines}" if machines is not None else "")
            + f", {status['slots']} of max {status['max_slots']} slots"
        )
    stopped = status.get("stopped") or {"machines": 0}
    if stopped["machines"]:
        machines = stopped["machines"]
        counts += (
            f"; {machines} stopped machine{'s' if machines > 1 else ''}, "
            f"disk ${stopped['disk_per_hour']:.3f}/h"
        )
    lines = [f"{title} at {status['now']}: {size}{bound}" + (f"; {counts}" if counts else "")]
    # How long each has been stopped, in a column of its own while any is; what drifted
    # too, while any has.
    when = bool(stopped["machines"])
    drift = any(item.get("drifted") for item in status["instances"])
    header = (
        "instance", "state", "type", "age", "idle", *(("stopped",) * when), "registered",
        *(("old config",) * drift),
    )  # fmt: skip
    rows: list[tuple[str, ...]] = [header]
    for item in status["instances"]:
        since = item.get("stopped_s")
        rows.append(
            (
                item["id"],
                item["state"] + (" (spot)" if item["spot"] else ""),
                item["type"],
                _ago(item["age_s"]),
                _ago(item["idle_s"]) if item["idle_s"] is not None else "-",
                *((_ago(since) if since is not None else "-",) * when),
                item["registered_at"] or "-",
                *((item.get("drifted") or "-",) * drift),
            )
        )
    table = _table(rows, styled)
    lines += ["  " + line for line in table] if status["instances"] else ["  no instances"]
    if status["spot_requests"]:
        rows = [("spot request", "state", "status", "age", "instance")]  # a new table
        for request in status["spot_requests"]:
            rows.append(
                (
                    request["id"],
                    request["state"],
                    request["status"] or "-",
                    _ago(request["age_s"]),
                    request["instance_id"] or "-",
                )
            )
        lines += ["  " + line for line in _table(rows, styled)]
    else:
        lines.append("  spot requests: none")
    for reservation in status.get("reservations") or ():
        unusable = "" if reservation["usable"] else "; not used now"
        lines.append(
            f"  reservation {reservation['about']}: {reservation['pool_machines']} of the "
            f"pool's machines{unusable}"
        )
    last = status["last_snapshot"]
    if last is None and status.get("last_snapshot_unread"):
        lines.append(f"  last snapshot: not read ({status['last_snapshot_unread']})")
    elif last is None:
        lines.append("  last snapshot: none recorded")
    else:
        stale = ", stale: is the master publishing?" if last["stale"] else ""
        lines.append(
            f"  last snapshot: seq {last['seq']} at {last['time']} ({_ago(last['age_s'])} ago"
            f"{stale}): {last['pending']} pending tasks ({last['pending_slots']} slots), "
            f"{last['agents']} agents ({last['busy']} busy, {last['idle']} idle, "
            f"{last['draining']} draining)"
            + _replacing(last.get("drifted") or 0, last.get("broken") or 0)
        )
        if last["launch_error"]:
            lines.append(
                f"  last launch error at {last['launch_error_at']}: {last['launch_error']}"
            )
        else:
            lines.append("  last launch error: none recorded")
        if last.get("launches_paused_until"):
            lines.append(
                f"  launches paused until {last['launches_paused_until']} "
                "(launch_error_retries refused within launch_error_timeout)"
            )
    plan = status["plan"]
    lines.append(f"  next pass, with {plan['basis']}:")
    lines += [f"    {action}" for action in plan["actions"] or ["nothing to do"]]
    return lines


# ANSI styles for a terminal: states as an operator reads them at a glance.
_BOLD = "1"
_COLOURS = {
    "busy": "32",  # green: working
    "idle": "33",  # yellow: costs money, does nothing
    "unregistered": "36",  # cyan: on its way
    "starting": "36",
    "disconnected": "31",  # red: something is wrong
    "stopping": "31",
    "stopped": "31",
}


def _paint(text: str, style: str) -> str:
    return f"\x1b[{style}m{text}\x1b[0m"


def _table(rows: list[tuple[str, ...]], styled: bool = False) -> list[str]:
    widths = [max(len(row[col]) for row in rows) for col in range(len(rows[0]))]
    if not styled:
        return [
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            for row in rows
        ]

    # Padding is measured on the plain text; colour goes on after it.
    def line(left: str, middle: str, right: str) -> str:
        return left + middle.join("─" * (width + 2) for width in widths) + right

    def cells(row: tuple[str, ...], header: bool) -> str:
        painted = []
        for cell, width in zip(row, widths, strict=True):
            padded = cell.ljust(width)
            state = cell.split(" ")[0]
            if header:
                padded = _paint(padded, _BOLD)
            elif state in _COLOURS:
                padded = _paint(padded, _COLOURS[state])
            painted.append(f" {padded} ")
        return "│" + "│".join(painted) + "│"

    body = [cells(row, header=False) for row in rows[1:]]
    return [
        line("┌", "┬", "┐"), cells(rows[0], header=True), line("├", "┼", "┤"),
        *body, line("└", "┴", "┘"),
    ]  # fmt: skip


def _seconds(delta: timedelta) -> int:
    return max(0, int(delta.total_seconds()))


def _since(when: datetime | None, now: datetime) -> int | None:
    return None if when is None else _seconds(now - when)


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ago(seconds: int) -> str:
    return format_duration(timedelta(seconds=seconds)) if seconds else "0s"
