"""The one builder of each input, for every test folder: pools (as models and as config
entries), configs, instances, spot requests, fleets and snapshots.

A folder with defaults of its own (the simulator's small pool, the AWS tests' account)
passes them through these. Everything is relative to a fixed ``NOW`` so a scenario reads
as "launched 25 minutes ago", never as a wall-clock time. The default pool is
Determined's defaults on a p3.8xlarge: 4 slots per instance, min 0, max 5, idle and
starting periods 20m, and a disconnected period of 10m.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from dynagent.aws.refusals import UNFULFILLABLE_SPOT_STATUSES
from dynagent.core.config import Config, Pool, config_from_document
from dynagent.core.fleet import Fleet, Instance, InstanceState, Mark, RequestState, SpotRequest
from dynagent.core.snapshot import Agent, PendingTask, Snapshot

NOW = datetime(2024, 5, 1, 12, 0, 30, tzinfo=UTC)
POOL_NAME = "gpu"
IMAGE_ID = "ami-0123456789abcdef0"


def ago(minutes: float = 0, *, hours: float = 0, seconds: float = 0) -> datetime:
    """A moment before ``NOW``."""
    return NOW - timedelta(hours=hours, minutes=minutes, seconds=seconds)


def provider_fields(**overrides: Any) -> dict[str, Any]:
    """An AWS provider section as it would appear in master.yaml, with overrides."""
    fields: dict[str, Any] = {
        "type": "aws",
        "region": "us-east-1",
        "image_id": IMAGE_ID,
        "instance_type": "p3.8xlarge",
    }
    fields.update(overrides)
    return fields


def pool(name: str = POOL_NAME, **overrides: Any) -> Pool:
    """A validated pool; keyword arguments override provider fields (``max_instances=2``)."""
    return Pool.model_validate({"name": name, "provider": provider_fields(**overrides)})


def pool_entry(name: str = POOL_NAME, **overrides: Any) -> dict[str, Any]:
    """A pool as master.yaml's ``resource_pools`` lists it, for ``config``."""
    return {"pool_name": name, "provider": provider_fields(**overrides)}


def config_document(*entries: dict[str, Any], **settings: Any) -> dict[str, Any]:
    """A pools file's document: ``pool_entry``s, and dynagent's own settings when given."""
    document: dict[str, Any] = {"resource_pools": list(entries)}
    if settings:
        document["dynagent"] = settings
    return document


def config(*entries: dict[str, Any], **settings: Any) -> Config:
    """The checked config of ``config_document``."""
    return config_from_document(config_document(*entries, **settings))


def instance(
    instance_id: str,
    *,
    state: InstanceState = InstanceState.RUNNING,
    launched: datetime | None = None,
    registered: datetime | None = None,
    idle_since: datetime | None = None,
    disconnected_since: datetime | None = None,
    spot_request_id: str | None = None,
) -> Instance:
    """A managed instance; by default launched an hour ago, never registered, no marks."""
    marks: dict[Mark, datetime] = {}
    if registered is not None:
        marks[Mark.REGISTERED] = registered
    if idle_since is not None:
        marks[Mark.IDLE_SINCE] = idle_since
    if disconnected_since is not None:
        marks[Mark.DISCONNECTED_SINCE] = disconnected_since
    return Instance(
        id=instance_id,
        state=state,
        launched_at=launched if launched is not None else ago(hours=1),
        marks=marks,
        spot_request_id=spot_request_id,
    )


def starting(instance_id: str, *, minutes_ago: float = 2) -> Instance:
    """Launched ``minutes_ago`` and not registered yet."""
    return instance(instance_id, state=InstanceState.STARTING, launched=ago(minutes_ago))


def agent_instance(
    instance_id: str,
    *,
    launched: datetime | None = None,
    idle_since: datetime | None = None,
    disconnected_since: datetime | None = None,
) -> Instance:
    """A running instance whose agent registered (50 minutes ago)."""
    return instance(
        instance_id,
        launched=launched,
        registered=ago(50),
        idle_since=idle_since,
        disconnected_since=disconnected_since,
    )


def spot_request(
    request_id: str,
    *,
    state: RequestState = RequestState.OPEN,
    created: datetime | None = None,
    status_code: str = "pending-evaluation",
    status_updated: datetime | None = None,
    instance_id: str | None = None,
) -> SpotRequest:
    """A managed spot request; by default open, created a minute ago, still evaluating.
    Unfulfillable as the EC2 adapter reports it: by its status code."""
    return SpotRequest(
        id=request_id,
        state=state,
        created_at=created if created is not None else ago(1),
        status_code=status_code,
        status_updated_at=status_updated,
        instance_id=instance_id,
        unfulfillable=status_code in UNFULFILLABLE_SPOT_STATUSES,
    )


def fleet(*instances: Instance, requests: Iterable[SpotRequest] = ()) -> Fleet:
    return Fleet(instances=tuple(instances), spot_requests=tuple(requests))


def task(name: str, slots: int) -> PendingTask:
    return PendingTask(task=name, slots=slots)


def idle(agent_id: str, slots: int = 4) -> Agent:
    """A connected agent with nothing running."""
    return Agent(id=agent_id, slots=slots, used_slots=0)


def busy(agent_id: str, slots: int = 4, used: int | None = None) -> Agent:
    """A connected agent running something (all its slots unless ``used`` says)."""
    return Agent(id=agent_id, slots=slots, used_slots=slots if used is None else used)


def snapshot(
    *,
    pending: Iterable[PendingTask | tuple[str, int]] = (),
    agents: Iterable[Agent | tuple[str, int, int]] = (),
    seq: int = 7,
    time: datetime = NOW,
    pool_name: str = POOL_NAME,
) -> Snapshot:
    """A snapshot; pending tasks as (task, slots) and agents as (id, slots, used slots)
    where the models would only repeat the numbers."""
    return Snapshot(
        pool=pool_name,
        seq=seq,
        time=time,
        pending=tuple(p if isinstance(p, PendingTask) else task(*p) for p in pending),
        agents=tuple(
            a if isinstance(a, Agent) else Agent(id=a[0], slots=a[1], used_slots=a[2])
            for a in agents
        ),
    )


def snapshot_document(**overrides: Any) -> dict[str, Any]:
    """A v1 snapshot as the master sends it (JSON-ready), with overrides."""
    document: dict[str, Any] = {
        "type": "pool.snapshot",
        "version": 1,
        "pool": POOL_NAME,
        "seq": 7,
        "time": "2024-05-01T12:00:00Z",
        "pending": [{"task": "exp-1.trial-1", "slots": 4}],
        "agents": [{"id": "i-0a", "slots": 4, "used_slots": 2}],
    }
    document.update(overrides)
    return document
