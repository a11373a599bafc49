"""The master's in-memory state: users and their tokens, pools, agents, tasks (each an
allocation, most of a job) and experiments, with the fake clock and the deterministic ids
it hands out; and its history, what the master's database keeps of work that ended (tasks
with their allocation's start and end, experiments' ends, agents' stays: ``agent_stats``).
``MasterState`` is everything a reset() forgets."""

from __future__ import annotations

import base64
import hashlib
import itertools
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Final, Literal, NamedTuple, get_args

from dynagent.testing.determined.gateway import JsonObject, timestamp
from dynagent.testing.determined.master_config import (
    DEFAULT_POOL,
    MAX_AUX_CONTAINERS_PER_AGENT,
    MasterConfig,
    ProviderConfig,
)

# determined.common.api.authentication.PASSWORD_SALT: the client hashes before sending.
PASSWORD_SALT: Final = "GubPEmmotfiK9TMD6Zdw"
# Complex enough that Determined's CLI does not warn about it on every run.
DEFAULT_PASSWORD: Final = "L0cal-Determined"
_EPOCH: Final = datetime(2025, 1, 1, tzinfo=UTC)
_TICK: Final = timedelta(milliseconds=1250)

SlotType = Literal["cuda", "cpu", "none"]
SLOT_TYPES: Final = frozenset(get_args(SlotType))
# Determined's device type for a slot type's devices (a none agent has no devices).
DEVICE_TYPES: Final = {"cuda": "TYPE_CUDA", "cpu": "TYPE_CPU", "none": "TYPE_UNSPECIFIED"}
PoolType = Literal["STATIC", "AWS", "GCP"]
TaskType = Literal[
    "TRIAL", "COMMAND", "NOTEBOOK", "SHELL", "TENSORBOARD", "CHECKPOINT_GC", "GENERIC"
]
TASK_TYPES: Final = frozenset(get_args(TaskType))
# What goes through admission: a command, notebook, shell, TensorBoard or an experiment's trial.
LaunchType = Literal["TRIAL", "COMMAND", "NOTEBOOK", "SHELL", "TENSORBOARD"]
LAUNCH_TYPES: Final = frozenset(get_args(LaunchType))
# Determined's job type for each user-visible task type; checkpoint GC has no job.
JOB_TYPES: Final = {
    "TRIAL": "TYPE_EXPERIMENT",
    "COMMAND": "TYPE_COMMAND",
    "NOTEBOOK": "TYPE_NOTEBOOK",
    "SHELL": "TYPE_SHELL",
    "TENSORBOARD": "TYPE_TENSORBOARD",
    "GENERIC": "TYPE_GENERIC",
}


def salt_and_hash(password: str) -> str:
    """What Determined's client sends as a hashed password (an empty one stays empty)."""
    if not password:
        return password
    return hashlib.sha512((PASSWORD_SALT + password).encode()).hexdigest()


@dataclass
class User:
    id: int
    username: str
    password_hash: str
    admin: bool
    active: bool
    modified: datetime
    last_auth: datetime | None = None

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "id": self.id,
            "username": self.username,
            "admin": self.admin,
            "active": self.active,
            "agentUserGroup": None,
            "displayName": "",
            "modifiedAt": timestamp(self.modified),
            "remote": False,
        }
        if self.last_auth is not None:  # proto3 optional: absent when unset
            out["lastAuthAt"] = timestamp(self.last_auth)
        return out


@dataclass
class Token:
    user_id: int
    access: bool  # a long-lived access token, not a login session
    expires: datetime | None = None


@dataclass
class Pool:
    name: str
    type: PoolType
    slots_per_agent: int  # -1 for a static pool
    location: str
    instance_type: str
    preemptible: bool
    min_agents: int
    max_agents: int
    description: str
    provider: ProviderConfig | None = None  # None for a static pool
    max_aux_containers_per_agent: int = MAX_AUX_CONTAINERS_PER_AGENT
    config_fields: JsonObject = field(default_factory=dict)  # as GET master/config prints it
    fitting_policy: str = "best"  # its scheduler's, else the resource manager's
    # provisioner_launch_error(): the provisioner's launch error, the instances it lists
    launch_error: str | None = None
    listed_instances: int = 0


@dataclass
class Experiment:
    id: int
    name: str
    config: JsonObject
    original_config: str
    job_id: str
    pool: str
    user: User
    started: datetime
    active: bool
    trial_ids: list[int] = field(default_factory=list)
    task_ids: list[str] = field(default_factory=list)  # each trial's task, as trial_ids
    # When its last trial ended, and how (COMPLETED, or ERROR if no trial completed).
    ended: datetime | None = None
    outcome: str | None = None


@dataclass
class Agent:
    id: str
    pool: str
    brand: str
    address: str
    registered: datetime
    owners: list[str | None]  # the container on each device, by device id
    zero_slot: list[str] = field(default_factory=list)  # containers with no device
    enabled: bool = True
    draining: bool = False
    reconnecting: bool = False
    stashed: tuple[bool, bool] = (True, False)  # (enabled, draining) before reconnecting
    reconnecting_since: datetime | None = None  # when its websocket dropped
    slot_type: SlotType = "cuda"

    @property
    def slots(self) -> int:
        return len(self.owners)

    def free_devices(self) -> list[int]:
        return [d for d, owner in enumerate(self.owners) if owner is None]

    def used(self) -> int:
        return sum(owner is not None for owner in self.owners)

    def schedulable(self) -> bool:
        return self.enabled and not self.draining and not self.reconnecting


@dataclass
class Resources:
    container_id: str
    agent_id: str
    devices: list[int]


@dataclass
class Task:
    seq: int
    task_id: str
    allocation_id: str
    job_id: str | None
    entity_id: str
    name: str
    type: str
    slots: int
    pool: str
    priority: int
    user_id: int
    username: str
    submitted: datetime
    resources: list[Resources] = field(default_factory=list)
    job_name: str | None = None  # the job's name when not the allocation's (an experiment's)
    trial_id: int | None = None  # a trial of an experiment made here
    # The allocation's start, when it was placed (allocation.go markResourcesStarted; None
    # if it never was), and the task's end: FINISHED, KILLED or ERROR.
    started: datetime | None = None
    ended: datetime | None = None
    end_state: str | None = None

    @property
    def placed(self) -> bool:
        return bool(self.resources)


@dataclass
class AgentStats:
    """A row of the master's ``agent_stats``: an agent's stay, from when it registered to
    when it left (None while connected), with its slots (db.RecordAgentStats)."""

    agent_id: str
    slots: int
    start: datetime
    end: datetime | None = None


class SubmittedTask(NamedTuple):
    """What submit() made: the task, its allocation and its job (None for checkpoint GC)."""

    task_id: str
    allocation_id: str
    job_id: str | None


class LaunchedTask(NamedTuple):
    """What launch() queued: the task, its allocation, its job, and the launch warnings
    (``LAUNCH_WARNING_CURRENT_SLOTS_EXCEEDED`` when admitted with ``launch_error: false``)."""

    task_id: str
    allocation_id: str
    job_id: str | None
    warnings: tuple[str, ...]


class AgentRegistration(NamedTuple):
    """An agent that connected itself (POST /agents): who, where, with what."""

    agent_id: str
    pool: str
    slots: int
    slot_type: SlotType


class MasterState:
    """Everything a reset() forgets (all but the cluster name LocalDetermined was made
    with)."""

    def __init__(self, local_cluster_name: str) -> None:
        # LocalDetermined's cluster_name: the pools API's, and /info's unless master.yaml
        # names one.
        self.local_cluster_name = local_cluster_name
        self.now = _EPOCH
        self.counter = itertools.count(1)
        self.users: dict[str, User] = {}
        self.tokens: dict[str, Token] = {}
        self.token_ids: dict[str, int] = {}
        self.pools: dict[str, Pool] = {}
        self.default_compute_pool = DEFAULT_POOL
        self.default_aux_pool = DEFAULT_POOL
        self.agents: dict[str, Agent] = {}
        self.tasks: dict[str, Task] = {}  # by task id
        self.history: dict[str, Task] = {}  # tasks that ended, by task id, in end order
        self.agent_stats: list[AgentStats] = []
        self.ended: dict[str, str] = {}  # task id -> FINISHED, KILLED or ERROR
        self.errors: dict[str, str] = {}  # task id -> why its allocation failed
        self.launch_error = True  # master.yaml's launch_error
        self.cluster_name = ""
        self.config: MasterConfig | None = None
        self.records: dict[int, Experiment] = {}  # experiments made through the API
        self.trials = itertools.count(1)
        self.registrations: list[AgentRegistration] = []
        self.heartbeats: dict[str, int] = {}
        self.experiments = itertools.count(1)
        # knobs
        self.fail: list[tuple[int, str | None]] = []  # (HTTP status, path prefix)
        self.half_pages = 0
        self.unserved: set[str] = set()  # paths an older master does not have
        self.delay = 0.0
        self.bad_gateway = False

    def cluster_name_now(self) -> str:
        """master.yaml's cluster_name, else the constructor's."""
        return self.cluster_name or self.local_cluster_name

    def tick(self) -> datetime:
        self.now += _TICK
        return self.now

    def new_id(self, kind: str) -> str:
        """A UUID4-shaped id, the same on every run."""
        digest = hashlib.sha256(f"{kind}:{next(self.counter)}".encode()).digest()
        return str(uuid.UUID(bytes=digest[:16], version=4))

    def new_token(self, kind: str) -> str:
        raw = hashlib.sha256(f"{kind}:{next(self.counter)}".encode()).digest()
        return "v2.public." + base64.urlsafe_b64encode(raw * 3).decode().rstrip("=")

    def start_session(self, user: User) -> str:
        token = self.new_token("session")
        self.tokens[token] = Token(user_id=user.id, access=False)
        user.last_auth = self.tick()
        return token

    def user_by_id(self, user_id: int) -> User | None:
        return next((u for u in self.users.values() if u.id == user_id), None)

    def queue(
        self,
        name: str,
        slots: int,
        pool: str,
        type: str,
        priority: int,
        owner: User,
        *,
        experiment_id: int | None = None,
        job_id: str | None = None,
    ) -> Task:
        seq = next(self.counter)
        if type == "TRIAL":
            experiment = next(self.experiments) if experiment_id is None else experiment_id
            task_id = f"{experiment}.{self.new_id('trial')}"
            entity_id = str(experiment)
        else:
            task_id = self.new_id("task")
            entity_id = task_id
        if job_id is None and type in JOB_TYPES:
            job_id = self.new_id("job")
        task = Task(
            seq=seq,
            task_id=task_id,
            allocation_id=f"{task_id}.1",
            job_id=job_id,
            entity_id=entity_id,
            name=name,
            type=type,
            slots=slots,
            pool=pool,
            priority=priority,
            user_id=owner.id,
            username=owner.username,
            submitted=self.tick(),
        )
        self.tasks[task_id] = task
        return task

    def any_task(self, task_id: str) -> Task | None:
        """A task, running, queued or ended."""
        return self.tasks.get(task_id) or self.history.get(task_id)

    def visible_tasks(self, pool: str) -> list[Task]:
        """A pool's user-visible tasks in queue order (priority, then submission)."""
        tasks = [t for t in self.tasks.values() if t.pool == pool and t.job_id]
        return sorted(tasks, key=lambda t: (t.priority, t.seq))
