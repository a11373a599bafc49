"""A Determined master's cluster as its resource manager keeps it (``rm/agentrm``), driven
directly: its config and users, pools, agents, and the tasks it admits, schedules and
ends. ``Cluster`` is what a test does to the master without the API; ``LocalDetermined``
(master.py) serves it over HTTP."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final

import yaml

from dynagent.core.durations import parse_duration
from dynagent.testing.determined.admission import listing_failure
from dynagent.testing.determined.gateway import JsonObject
from dynagent.testing.determined.launching import create_experiment, create_trial, launch_task
from dynagent.testing.determined.master_config import (
    DEFAULT_POOL,
    DEFAULT_PRIORITY,
    MasterConfig,
    ProviderConfig,
    fitting_policy,
    pool_fields,
    provider_for_pool,
    read_master_config,
)
from dynagent.testing.determined.scheduler import end_task, kill_tasks_on, tick
from dynagent.testing.determined.state import (
    DEFAULT_PASSWORD,
    LAUNCH_TYPES,
    SLOT_TYPES,
    TASK_TYPES,
    Agent,
    AgentRegistration,
    AgentStats,
    LaunchedTask,
    LaunchType,
    MasterState,
    Pool,
    PoolType,
    SlotType,
    SubmittedTask,
    Task,
    TaskType,
    User,
    salt_and_hash,
)

DEFAULT_BRAND: Final = "NVIDIA A100-SXM4-80GB"


class Cluster:
    """The master's state and what a test does to it, under one lock (the HTTP API takes
    it too): safe to call from any thread. It starts with the pools of ``master_config``
    and the given users; see LocalDetermined, which adds the API."""

    def __init__(
        self,
        *,
        cluster_name: str = "local-determined",
        users: Mapping[str, str] | None = None,
        master_config: str | Mapping[str, Any] | None = None,
    ) -> None:
        self._cluster_name = cluster_name
        self._initial_config = read_master_config(master_config)
        self._initial_users = dict(
            users
            if users is not None
            else {"admin": DEFAULT_PASSWORD, "determined": DEFAULT_PASSWORD}
        )
        self._lock = threading.RLock()
        self._state = MasterState(self._cluster_name)
        self.reset()

    # -- state ----------------------------------------------------------------------

    def reset(self) -> None:
        """Back to the constructor's master config (its pools, empty), the initial users;
        knobs off."""
        self._restart(self._initial_config, keep_users=False)

    def configure(self, master_config: str | Mapping[str, Any] | None) -> None:
        """The master restarts with this master.yaml (text or mapping): its pools, empty,
        no agents, tasks or knobs; users and their logins kept, as the master's database
        keeps them. MasterConfigError, with the master's message, for a config the master
        refuses; the running master is then left as it was. reset() goes back to the
        constructor's config."""
        self._restart(read_master_config(master_config), keep_users=True)

    def _restart(self, config: MasterConfig, *, keep_users: bool) -> None:
        with self._lock:
            old = self._state
            self._state = MasterState(self._cluster_name)
            if keep_users:
                self._state.now, self._state.counter = old.now, old.counter
                self._state.users, self._state.tokens = old.users, old.tokens
                self._state.token_ids = old.token_ids
            self._state.config = config
            self._state.launch_error = config.launch_error
            self._state.cluster_name = config.cluster_name
            for pool in config.pools:
                self._add_configured_pool(pool.name, pool.description, pool.provider)
                added = self._state.pools[pool.name]
                added.max_aux_containers_per_agent = pool.max_aux_containers_per_agent
                added.config_fields = dict(pool.fields)
                added.fitting_policy = fitting_policy(config, pool)
            self._state.default_compute_pool = config.default_compute_pool
            self._state.default_aux_pool = config.default_aux_pool
            if keep_users:
                return
            for index, (name, password) in enumerate(self._initial_users.items()):
                self.add_user(name, password, admin=(name == "admin" or index == 0))

    @property
    def master_config(self) -> MasterConfig | None:
        """The config the master runs with (None until the first reset)."""
        with self._lock:
            return self._state.config

    # -- users and tokens -----------------------------------------------------------

    def add_user(
        self, username: str, password: str, *, admin: bool = False, active: bool = True
    ) -> int:
        """Add a user; its id."""
        with self._lock:
            if username in self._state.users:
                raise ValueError(f"user {username!r} exists")
            user = User(
                id=len(self._state.users) + 1,
                username=username,
                password_hash=salt_and_hash(password),
                admin=admin,
                active=active,
                modified=self._state.tick(),
            )
            self._state.users[username] = user
            return user.id

    def expire_tokens(self) -> None:
        """Every login session ends, as when sessions expire: their tokens now get 401.
        Access tokens (POST /api/v1/tokens) live on."""
        with self._lock:
            for token in [t for t, info in self._state.tokens.items() if not info.access]:
                del self._state.tokens[token]

    def login(self, username: str) -> str:
        """A session token for the user, without the API (for clients under test)."""
        with self._lock:
            return self._state.start_session(self._state.users[username])

    # -- pools ----------------------------------------------------------------------

    def add_pool(
        self,
        name: str,
        type: PoolType = "STATIC",
        *,
        slots_per_agent: int | None = None,
        location: str | None = None,
        instance_type: str = "",
        preemptible: bool = False,
        min_agents: int = 0,
        max_agents: int | None = None,
        description: str = "",
        default_compute: bool = False,
        default_aux: bool = False,
    ) -> None:
        """A resource pool, as if master.yaml listed it. A static pool's slotsPerAgent is
        -1; a cloud pool needs it, and gets a provider with it as its slots per instance
        and ``max_agents`` (default 5, Determined's) as its ``max_instances``, the rest
        Determined's defaults, for admission (not validated: a shorthand for tests)."""
        if type not in ("STATIC", "AWS", "GCP"):
            raise ValueError(f"pool type {type!r}: STATIC, AWS or GCP")
        provider = None
        if type == "STATIC":
            if slots_per_agent is not None:
                raise ValueError("a static pool has no slots per agent (the API says -1)")
            if max_agents:
                raise ValueError("a static pool has no max_agents (it has no provider)")
        else:
            if slots_per_agent is None or slots_per_agent < 0:
                raise ValueError(f"a {type} pool needs slots_per_agent >= 0")
            default_location = {"AWS": "us-west-2", "GCP": "us-central1-a"}
            provider = provider_for_pool(
                "aws" if type == "AWS" else "gcp",
                slots_per_instance=slots_per_agent,
                location=location or default_location[type],
                instance_type=instance_type,
                preemptible=preemptible,
                min_instances=min_agents,
                max_instances=5 if max_agents is None else max_agents,
            )
        with self._lock:
            self._add_configured_pool(name, description, provider)
            if default_compute:
                self._state.default_compute_pool = name
            if default_aux:
                self._state.default_aux_pool = name

    def _add_configured_pool(
        self, name: str, description: str, provider: ProviderConfig | None
    ) -> None:
        if name in self._state.pools:
            raise ValueError(f"pool {name!r} exists")
        pool_type: PoolType = "STATIC"
        if provider is not None:
            pool_type = "AWS" if provider.type == "aws" else "GCP"
        self._state.pools[name] = Pool(
            name=name,
            type=pool_type,
            slots_per_agent=-1 if provider is None else provider.slots_per_instance,
            location="on-prem" if provider is None else provider.location,
            instance_type="" if provider is None else provider.instance_type,
            preemptible=False if provider is None else provider.preemptible,
            min_agents=0 if provider is None else provider.min_instances,
            max_agents=0 if provider is None else provider.max_instances,
            description=description,
            provider=provider,
            config_fields=pool_fields(name, description, provider),
        )
        if self._state.config is not None:  # no scheduler of its own: the manager's
            scheduler = self._state.config.resource_manager["scheduler"]
            self._state.pools[name].fitting_policy = scheduler["fitting_policy"]

    def provisioner_launch_error(
        self, pool: str, message: str | None, *, listed_instances: int = 0
    ) -> None:
        """The pool's provisioner failed to launch (``message``, e.g. an EC2 error) and its
        provider lists ``listed_instances`` instances; None clears the error. From the next
        schedule() on, pending tasks in the pool that want more slots than those instances
        hold fail, as Determined's ``pruneTaskList`` fails them (task_state() ERROR).
        ValueError for a pool with no provider (no provisioner) or one whose provider
        cannot list: Determined's ``Provision`` returns before it ever launches there."""
        if listed_instances < 0:
            raise ValueError("listed_instances must be >= 0")
        with self._lock:
            if pool not in self._state.pools:
                raise ValueError(f"no pool {pool!r}")
            target = self._state.pools[pool]
            if target.provider is None:
                raise ValueError(
                    f"pool {pool!r} has no provider, so Determined runs no provisioner for it "
                    "and it can have no launch error"
                )
            failure = listing_failure(target.provider)
            if failure is not None and message is not None:
                raise ValueError(
                    f"pool {pool!r}: its provider cannot list instances ({failure}); "
                    "Determined's provisioner returns before launching, so it never has a "
                    "launch error"
                )
            target.launch_error, target.listed_instances = message, listed_instances

    # -- agents ---------------------------------------------------------------------

    def add_agent(
        self,
        agent_id: str,
        pool: str = DEFAULT_POOL,
        slots: int = 8,
        *,
        hostname: str | None = None,
        brand: str = DEFAULT_BRAND,
        slot_type: SlotType = "cuda",
    ) -> None:
        """An agent connects with ``slots`` devices of ``slot_type`` (CUDA by default):
        enabled, not draining. A ``none`` agent has no slots."""
        if not agent_id or "/" in agent_id:
            raise ValueError(f"invalid agent id specified: {agent_id!r}")
        if slots < 0:
            raise ValueError("slots must be >= 0")
        if slot_type not in SLOT_TYPES:
            raise ValueError(f"slot type {slot_type!r}: cuda, cpu or none")
        if slot_type == "none" and slots:
            raise ValueError("an agent with slot type none has no slots")
        with self._lock:
            if pool not in self._state.pools:
                raise ValueError(f"cannot find specified resource pool {pool} for agent {agent_id}")
            if agent_id in self._state.agents:
                raise ValueError(f"agent {agent_id!r} exists")
            index = len(self._state.agents) + 1
            self._state.agents[agent_id] = Agent(
                id=agent_id,
                pool=pool,
                brand=brand,
                address=hostname or f"10.0.{index // 250}.{index % 250 + 1}",
                registered=self._state.tick(),
                owners=[None] * slots,
                slot_type=slot_type,
            )
            # agent.go -> db.RecordAgentStats: the agent's stay begins.
            stay = AgentStats(agent_id, slots, self._state.now)
            self._state.agent_stats.append(stay)

    def remove_agent(self, agent_id: str) -> None:
        """The agent goes away (or misses its reconnect deadline); its tasks are killed."""
        with self._lock:
            self._remove_agent(agent_id)

    def _remove_agent(self, agent_id: str) -> None:
        kill_tasks_on(self._state, self._agent(agent_id))
        del self._state.agents[agent_id]
        # db.EndAgentStats: the open row of the agent's stay ends.
        now = self._state.tick()
        for stay in self._state.agent_stats:
            if stay.agent_id == agent_id and stay.end is None:
                stay.end = now

    def reconnecting(self, agent_id: str, reconnecting: bool = True) -> None:
        """The agent's websocket dropped and the master waits for it to come back
        (True), or it came back (False): while waiting it is listed disabled and
        draining, keeps its tasks, and enable/disable fail with HTTP 500. Past its pool's
        ``agent_reconnect_wait`` (25s by default) the master gives up on it: the agent is
        removed and its tasks killed (agentrm/agent.go, the reconnect timers), so a
        machine stopped for longer registers again as a new agent of the same id.
        Simpler than the master: the window is checked when ``advance`` moves the clock,
        not at each tick of it."""
        with self._lock:
            agent = self._agent(agent_id)
            if reconnecting and not agent.reconnecting:
                agent.stashed = (agent.enabled, agent.draining)
                agent.enabled, agent.draining, agent.reconnecting = False, True, True
                agent.reconnecting_since = self._state.now
            elif not reconnecting and agent.reconnecting:
                (agent.enabled, agent.draining), agent.reconnecting = agent.stashed, False

    def agent_state(self, agent_id: str) -> tuple[bool, bool]:
        """(enabled, draining), as the API lists the agent."""
        with self._lock:
            agent = self._agent(agent_id)
            return agent.enabled, agent.draining

    def _agent(self, agent_id: str) -> Agent:
        try:
            return self._state.agents[agent_id]
        except KeyError:
            raise KeyError(f"no agent {agent_id!r}") from None

    # -- tasks ----------------------------------------------------------------------

    def submit(
        self,
        name: str,
        slots: int,
        pool: str | None = None,
        type: TaskType = "TRIAL",
        *,
        priority: int = DEFAULT_PRIORITY,
        user: str | None = None,
    ) -> SubmittedTask:
        """Queue a task the master has already admitted (not placed until schedule()): no
        admission here, so a test can set up any queue; launch() and the API's launch
        endpoints admit first. The pool defaults to the default compute pool (the aux
        pool for a zero-slot task). A TRIAL here belongs to no experiment the history
        lists: launch() one for that."""
        if type not in TASK_TYPES:
            raise ValueError(f"task type {type!r}: one of {sorted(TASK_TYPES)}")
        if slots < 0:
            raise ValueError("slots must be >= 0")
        with self._lock:
            state = self._state
            if pool is None:
                pool = state.default_aux_pool if slots == 0 else state.default_compute_pool
            if pool not in state.pools:
                raise ValueError(f"no pool {pool!r}")
            owner = state.users[user] if user else next(iter(state.users.values()))
            task = state.queue(name, slots, pool, type, priority, owner)
            return SubmittedTask(task.task_id, task.allocation_id, task.job_id)

    def launch(
        self,
        type: LaunchType,
        slots: int | None = None,
        pool: str | None = None,
        *,
        single_node: bool = False,
        priority: int | None = None,
        user: str | None = None,
    ) -> LaunchedTask:
        """Submit through the master's admission, as the type's endpoint does
        (``POST /api/v1/commands``, ``notebooks``, ``shells``, ``tensorboards``,
        ``experiments``): ApiError with that endpoint's code and message when the master
        refuses; otherwise the task is queued, with the launch warnings the answer would
        carry. ``slots`` defaults as Determined's do (1; a TensorBoard always takes 0); a
        TRIAL is the one trial of a new experiment with ``slots_per_trial: slots``, and
        ``single_node`` is its ``resources.is_single_node`` (the other types are always
        single-node). ``user`` defaults to the first user."""
        if type not in LAUNCH_TYPES:
            raise ValueError(f"launch type {type!r}: one of {sorted(LAUNCH_TYPES)}")
        if single_node and type != "TRIAL":
            raise ValueError("single_node is for a TRIAL: other types are always single-node")
        resources: JsonObject = {}
        if slots is not None:
            resources["slots_per_trial" if type == "TRIAL" else "slots"] = slots
        if pool is not None:
            resources["resource_pool"] = pool
        if priority is not None:
            resources["priority"] = priority
        if single_node:
            resources["is_single_node"] = True
        with self._lock:
            owner = self._state.users[user] if user else next(iter(self._state.users.values()))
            if type == "TRIAL":
                config = {"entrypoint": "python3 train.py", "resources": resources}
                experiment, warnings = create_experiment(
                    self._state, config, yaml.safe_dump(config), owner, activate=True
                )
                task = self._state.tasks[experiment.task_ids[0]]
            else:
                task, warnings = launch_task(self._state, type, {"resources": resources}, owner)
            return LaunchedTask(task.task_id, task.allocation_id, task.job_id, warnings)

    def create_trial(self, experiment_id: int) -> SubmittedTask:
        """The experiment's searcher creates another trial (its slots_per_trial, pool and
        priority), queued as a task of the experiment's job. ApiError for an experiment
        that is paused or has ended (with its last trial), KeyError for an unknown one."""
        with self._lock:
            experiment = self._state.records.get(experiment_id)
            if experiment is None:
                raise KeyError(f"no experiment {experiment_id}")
            task = create_trial(self._state, experiment)
            return SubmittedTask(task.task_id, task.allocation_id, task.job_id)

    def advance(self, seconds: float) -> None:
        """Time passes on the master's fake clock (which also ticks 1.25 s per event), so
        that the tasks the history keeps run for as long as a test wants."""
        if seconds < 0:
            raise ValueError("the clock does not go back")
        with self._lock:
            self._state.now += timedelta(seconds=seconds)
            for agent in list(self._state.agents.values()):
                since = agent.reconnecting_since
                waited = self._state.now - since if agent.reconnecting and since else None
                if waited is not None and waited >= self._reconnect_wait(agent.pool):
                    self._remove_agent(agent.id)

    def _reconnect_wait(self, pool: str) -> timedelta:
        """The pool's agent_reconnect_wait (resource_pool_config.go), 25s by default."""
        found = self._state.pools.get(pool)
        text = (found.config_fields.get("agent_reconnect_wait") if found else None) or "25s"
        return parse_duration(str(text))

    def now(self) -> datetime:
        """The master's fake clock."""
        with self._lock:
            return self._state.now

    def schedule(self) -> list[str]:
        """One scheduler tick: first prune the pools whose provisioner has a launch
        error (provisioner_launch_error), then place what fits, in priority then
        submission order; the task ids placed."""
        with self._lock:
            return tick(self._state)

    def finish(self, task_id: str) -> None:
        """The task ends (its task id or allocation id); it leaves every list but the
        history (GET /api/v1/tasks/{id}, the experiment's trials, the raw allocation)."""
        with self._lock:
            end_task(self._state, self._task(task_id), "FINISHED")

    def finish_in_turn(self, ends: Sequence[tuple[str, float]]) -> dict[str, datetime]:
        """Each task of ``ends`` finishes after its hours have passed on the fake clock, one
        after the other (hours from the one before); when each ended, by task id."""
        ended: dict[str, datetime] = {}
        for task_id, hours in ends:
            self.advance(hours * 3600)
            self.finish(task_id)
            ended[task_id] = self.now()
        return ended

    def task_state(self, task_id: str) -> str:
        """QUEUED, RUNNING, FINISHED, KILLED (by a disable without drain) or ERROR (pruned
        after a launch error: task_error() says why)."""
        with self._lock:
            if task_id in self._state.ended:
                return self._state.ended[task_id]
            return "RUNNING" if self._task(task_id).placed else "QUEUED"

    def task_error(self, task_id: str) -> str | None:
        """Why the task's allocation failed (a task in ERROR), else None."""
        with self._lock:
            return self._state.errors.get(task_id)

    def placement(self, task_id: str) -> dict[str, list[int]]:
        """Agent id -> device ids the task runs on ([] for a zero-slot task)."""
        with self._lock:
            return {r.agent_id: list(r.devices) for r in self._task(task_id).resources}

    def _task(self, task_id: str) -> Task:
        tasks = self._state.tasks
        found = tasks.get(task_id) or next(
            (t for t in tasks.values() if t.allocation_id == task_id), None
        )
        if found is None:
            raise KeyError(f"no task {task_id!r}")
        return found

    # -- agents that connect themselves ---------------------------------------------

    def registrations(self) -> list[AgentRegistration]:
        """Every POST /agents the master accepted, in order (a returning agent again)."""
        with self._lock:
            return list(self._state.registrations)

    def heartbeats(self, agent_id: str) -> int:
        """How many heartbeats the agent sent since it first registered."""
        with self._lock:
            return self._state.heartbeats.get(agent_id, 0)
