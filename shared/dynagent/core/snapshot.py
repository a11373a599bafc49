"""The wire contract: a pool snapshot, version 1.

A snapshot is the whole truth about one pool at one moment (level-triggered): the
tasks the master could not place and the agents connected in the pool. Replaying one
is harmless; a later one supersedes it.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Annotated, Any, Final, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.dataclasses import dataclass

SNAPSHOT_TYPE: Final = "pool.snapshot"
SNAPSHOT_VERSION: Final = 1
# A snapshot's ``draining: true`` lets the functions terminate the (empty) agent only
# this long after the snapshot's ``time``: a lease. A publisher that enables an agent
# it reported draining must first stop reporting it so, and wait until its last such
# report is older than this plus the clocks' skew; only then can no function still act
# on that report (a delivery that was slow, or a record retried after a failure).
DRAINING_REPORT_LEASE: Final = timedelta(seconds=30)


class InvalidSnapshot(ValueError):
    """A message that is not a snapshot we can apply; never worth retrying."""


class _Wire(BaseModel):
    # Unknown fields are ignored so a newer master can add some within version 1. Only
    # keys are worth caching when reading JSON: ids and task names are each seen once.
    model_config = ConfigDict(frozen=True, extra="ignore", cache_strings="keys")


# Determined's API carries slots as int32 (task.proto ``slots_needed``, job.proto
# ``requested_slots``, master.proto ``slots``): a count beyond it came from no master.
MAX_SLOTS: Final = 2**31 - 1
# How far back a snapshot's ``arrivals`` reach: what ``warm_headroom_slots: auto`` sizes
# the pool's free room from (``core.decide.expected_work``).
ARRIVALS_WINDOW_SECONDS: Final = 3600


# A snapshot holds one task and one agent per entry, tens of thousands in a large pool:
# they are (validating) dataclasses, which pydantic builds several times faster than
# models, so parsing stays close to the cost of reading the JSON.
@dataclass(frozen=True, slots=True, config=ConfigDict(extra="ignore"))
class PendingTask:
    """A task the master could not place, and the slots (GPUs) it asks for.

    A task of 0 slots (a command, a TensorBoard, a checkpoint GC) runs on any agent, busy
    or not, that runs fewer than the pool's max_aux_containers_per_agent of them: it is
    demand for an agent only where no agent has room for it (``fitting.zero_slot_room``).

    Optional within version 1 (left out, they mean what a publisher that does not know
    them would mean):

    - ``priority``: its priority in the master's priority scheduler (a lower number goes
      first; Determined's default is 42); null where the master gives it none.
    - ``single_agent``: the master places it on one agent, never across several:
      commands, notebooks, shells, TensorBoards and checkpoint GC (Determined's
      ``command.go``), and experiments with ``resources.is_single_node``.
    """

    task: str = Field(min_length=1)
    slots: int = Field(ge=0, le=MAX_SLOTS)
    priority: int | None = None
    single_agent: bool = False


@dataclass(frozen=True, slots=True, config=ConfigDict(extra="ignore"))
class Agent:
    """An agent connected to the master; ``id`` is the instance id for dynamic agents.

    Optional within version 1:

    - ``draining``: the publisher disabled it with drain (the master places nothing new
      on it). In a pool with ``drain_idle_agents`` this is what lets the functions
      terminate it once idle, and the publisher enables it again for pending tasks.
    - ``enabled``: false when the master places nothing new on it and the publisher
      will not enable it again for pending tasks: an admin disabled it (with drain or
      without), or the master waits for it to reconnect. Its free slots are never room
      for pending tasks; whether it may be terminated is the pool's rule as for any
      agent (with ``drain_idle_agents``, only once reported ``draining``).
    - ``tasks``: the tasks running on it, zero-slot ones included (they use no slot, so
      ``used_slots`` alone would call the agent idle).
    - ``retired``: the publisher drained it and will never enable it again. Where the
      snapshot ``retires``, these, once idle, are the only agents a pool with
      ``drain_idle_agents`` terminates; their slots are never room.
    """

    id: str = Field(min_length=1)
    slots: int = Field(ge=0, le=MAX_SLOTS)
    used_slots: int = Field(ge=0, le=MAX_SLOTS)
    draining: bool = False
    tasks: int = Field(default=0, ge=0)
    enabled: bool = True
    # Left out of the message while false: it would add its bytes to every agent of
    # snapshots near the queue's message size.
    retired: bool = Field(default=False, exclude_if=lambda retired: not retired)

    @model_validator(mode="after")
    def _used_within_slots(self) -> Agent:
        if self.used_slots > self.slots:
            raise ValueError(f"used_slots ({self.used_slots}) exceeds slots ({self.slots})")
        return self

    @property
    def idle(self) -> bool:
        return self.used_slots == 0 and self.tasks == 0


@dataclass(frozen=True, slots=True, config=ConfigDict(extra="ignore"))
class Arrival:
    """``count`` tasks of ``slots`` slots each that came to the pool ``age`` seconds
    before the snapshot's ``time``: a task counts once, when the publisher first saw it
    (pending, or placed already)."""

    age: int = Field(ge=0, le=ARRIVALS_WINDOW_SECONDS)
    slots: int = Field(ge=0, le=MAX_SLOTS)
    count: int = Field(default=1, ge=1, le=MAX_SLOTS)


class Snapshot(_Wire):
    """One pool's pending tasks and connected agents at ``time``; ``seq`` orders them."""

    type: Literal["pool.snapshot"] = SNAPSHOT_TYPE
    version: Literal[1] = SNAPSHOT_VERSION
    pool: Annotated[str, Field(min_length=1)]
    seq: Annotated[int, Field(ge=0)]
    time: AwareDatetime
    pending: tuple[PendingTask, ...] = ()
    agents: tuple[Agent, ...] = ()
    # Optional within version 1: the master host's own addresses by Determined's
    # master_url alias (local-ipv4, public-ipv4, local-hostname, public-hostname,
    # internal-ip, external-ip), read by the bridge from that host's metadata.
    master_addresses: dict[str, str] | None = None
    # Optional within version 1: how the master's scheduler fits tasks on the pool's
    # agents (its fitting_policy): best (the fewest free slots left) or worst.
    fitting_policy: Literal["best", "worst"] | None = None
    # Optional within version 1: the publisher reports ``retired`` agents. Then, in a
    # pool with drain_idle_agents, a draining agent not retired is the publisher's to
    # enable again at any time, and only retired ones are terminated (no lease: a
    # retirement is never taken back). Without it, a draining report is a lease
    # (DRAINING_REPORT_LEASE), as publishers that came before it expect.
    retires: bool | None = Field(default=None, exclude_if=lambda retires: retires is None)
    # Optional within version 1: the tasks that came to the pool over the last
    # ARRIVALS_WINDOW_SECONDS, newest first (null: the publisher does not say). A pool
    # with ``warm_headroom_slots: auto`` keeps free room for the work they predict.
    arrivals: tuple[Arrival, ...] | None = Field(
        default=None, exclude_if=lambda arrivals: arrivals is None
    )

    def to_json(self) -> str:
        return self.model_dump_json()

    @property
    def dedup_id(self) -> str:
        """Identifies this snapshot to the queue, so a resend is dropped there."""
        return f"{self.pool}:{self.seq}"


def parse_snapshot(body: str | bytes) -> Snapshot:
    """Parse a message body; raise InvalidSnapshot saying what is wrong with it.

    A good message is read and validated in one step (pydantic's own JSON reader builds
    no dict of the whole message first: a third of the cost at 10,000 agents). Anything
    else is read again the long way, which says what is wrong: so a bad message gets
    the same answer either way, and the fast one is taken only where both agree.
    """
    try:
        snapshot = Snapshot.model_validate_json(body)
    except (ValueError, RecursionError):  # ValidationError is a ValueError
        pass
    else:
        # type and version have defaults, but a message must say them.
        if snapshot.model_fields_set >= _STATED:
            return snapshot
    return _parse_slowly(body)


# Fields whose value the fast path cannot tell from their default.
_STATED: Final = frozenset({"type", "version"})


def _parse_slowly(body: str | bytes) -> Snapshot:
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:
        raise InvalidSnapshot(f"not JSON: {error}") from None
    except RecursionError:
        # json's parser recurses per level: "[" * 100000 is a malformed message, not a
        # crash of the handler that would take the rest of its batch down with it.
        raise InvalidSnapshot("not JSON: nested too deeply") from None
    return snapshot_from_document(document)


def snapshot_from_document(document: Any) -> Snapshot:
    if not isinstance(document, dict):
        raise InvalidSnapshot("not a JSON object")
    kind = document.get("type")
    if kind != SNAPSHOT_TYPE:
        raise InvalidSnapshot(f"type is {kind!r}, expected {SNAPSHOT_TYPE!r}")
    version = document.get("version")
    if version != SNAPSHOT_VERSION:
        raise InvalidSnapshot(
            f"version {version!r} is not one this function knows (it reads {SNAPSHOT_VERSION})"
        )
    try:
        return Snapshot.model_validate(document)
    except ValidationError as error:
        raise InvalidSnapshot(_describe(error)) from None
    except RecursionError:
        raise InvalidSnapshot("a field is nested too deeply") from None


def _describe(error: ValidationError) -> str:
    problems = []
    for item in error.errors():
        path = ".".join(str(part) for part in item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "less_than_equal" and path.endswith("slots"):
            message = (
                f"{item['input']} is more slots than Determined's API carries "
                f"(at most {MAX_SLOTS:,}): no master sent this"
            )
        problems.append(f"{path}: {message}")
    return "; ".join(problems)


def snapshot_age(snapshot: Snapshot, now: datetime) -> float:
    """Seconds between the snapshot's time and now (negative when it is from the future)."""
    return (now - snapshot.time).total_seconds()
