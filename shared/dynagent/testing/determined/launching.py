"""Launching through the stock master's admission (``admission``): a command, notebook,
shell or TensorBoard (``api_command.go`` and the other ``api_*.go`` launchers) or an
experiment (``api_experiment.go``, ``core_experiment.go``) is admitted, then queued; a
refusal is the ApiError the launching endpoint answers with."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from dynagent.testing.determined.admission import PoolState, Refusal, resolve_resources
from dynagent.testing.determined.gateway import ApiError, JsonObject
from dynagent.testing.determined.master_config import DEFAULT_PRIORITY
from dynagent.testing.determined.state import Experiment, MasterState, Task, User

# Task type -> (response key, description prefix), from the api_*.go launchers.
LAUNCHED: Final = {
    "COMMAND": ("command", "Command"),
    "NOTEBOOK": ("notebook", "JupyterLab"),
    "SHELL": ("shell", "Shell"),
    "TENSORBOARD": ("tensorboard", "TensorBoard"),
}
_ADVERBS: Final = ("quickly", "gladly", "calmly", "boldly", "deeply")
_ADJECTIVES: Final = ("brave", "quiet", "lucky", "rapid", "tidy", "warm")
_NAMES: Final = ("otter", "heron", "lynx", "marmot", "finch", "bison", "gecko")


def _resource_int(resources: Mapping[str, Any], key: str, default: int) -> int:
    value = resources.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ApiError(3, f"resources.{key} must be an integer >= 0, not {value!r}")
    return value


def _resource_str(resources: Mapping[str, Any], key: str) -> str:
    value = resources.get(key) or ""
    if not isinstance(value, str):
        raise ApiError(3, f"resources.{key} must be a string, not {value!r}")
    return value


def _pool_states(state: MasterState) -> dict[str, PoolState]:
    slots: dict[str, list[int]] = {name: [] for name in state.pools}
    for agent in state.agents.values():
        slots[agent.pool].append(agent.slots)
    return {
        name: PoolState(name, pool.provider, tuple(slots[name]))
        for name, pool in state.pools.items()
    }


def _admit(
    state: MasterState, requested: str, slots: int, single_node: bool
) -> tuple[str, tuple[str, ...]]:
    """spec_util.go ResolveResources; Refusal as the Go code raises it."""
    pool, warnings = resolve_resources(
        _pool_states(state),
        requested,
        slots,
        single_node,
        default_compute=state.default_compute_pool,
        default_aux=state.default_aux_pool,
        launch_error=state.launch_error,
    )
    if pool not in state.pools:
        # Only a zero-slot task whose default aux pool names no pool gets here:
        # admission never looks it up, the allocation does (agentrm Allocate).
        raise ApiError(13, f"cannot find resource pool {pool}")
    return pool, warnings


def admit_task(
    state: MasterState, type: str, config: Mapping[str, Any]
) -> tuple[str, int, int, tuple[str, ...]]:
    """api_command.go getCommandLaunchParams up to its resources: (pool, slots,
    priority, warnings). Resources as model.ParseJustResources reads them (``slots``
    1 unless given; a TensorBoard's forced to 0), always single-node; a refusal
    wrapped as WrapWithFallbackCode wraps it (its own code, else InvalidArgument)."""
    resources = config.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise ApiError(3, "failed to prepare launch params: resources must be a mapping")
    slots = 0 if type == "TENSORBOARD" else _resource_int(resources, "slots", 1)
    requested = _resource_str(resources, "resource_pool")
    try:
        pool, warnings = _admit(state, requested, slots, True)
    except Refusal as refusal:
        raise ApiError(
            refusal.code or 3, f"failed to prepare launch params: {refusal.message}"
        ) from None
    return pool, slots, _resource_int(resources, "priority", DEFAULT_PRIORITY), warnings


def launch_task(
    state: MasterState, type: str, config: Mapping[str, Any], owner: User
) -> tuple[Task, tuple[str, ...]]:
    """An admitted command, notebook, shell or TensorBoard, queued."""
    pool, slots, priority, warnings = admit_task(state, type, config)
    description = config.get("description") or f"{LAUNCHED[type][1]} ({_petname(state)})"
    return state.queue(str(description), slots, pool, type, priority, owner), warnings


def admit_experiment(
    state: MasterState, config: Mapping[str, Any]
) -> tuple[str, int, tuple[str, ...]]:
    """parseCreateExperiment up to its resources: (pool, slots per trial, warnings).
    Its errors are plain Go errors (HTTP 500) unless they wrap a status error."""
    resources = config.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise ApiError(13, "invalid experiment configuration: resources must be a mapping")
    if "slots" in resources:
        raise ApiError(13, '<config>.resources: additionalProperties "slots" not allowed')
    slots = _resource_int(resources, "slots_per_trial", 1)
    single_node = resources.get("is_single_node") is True
    try:
        pool, warnings = _admit(
            state, _resource_str(resources, "resource_pool"), slots, single_node
        )
    except Refusal as refusal:
        raise ApiError(
            refusal.code or 13, f"invalid resource configuration: {refusal.message}"
        ) from None
    if not config.get("entrypoint"):
        raise ApiError(13, "managed experiments require entrypoint")
    return pool, slots, warnings


def create_experiment(
    state: MasterState, config: JsonObject, text: str, owner: User, *, activate: bool
) -> tuple[Experiment, tuple[str, ...]]:
    """An admitted experiment; activated, its first trial is queued (a searcher's other
    trials come only when a test asks, Cluster.create_trial: one trial of slots_per_trial
    is what admission and the autoscaler see first)."""
    pool, _, warnings = admit_experiment(state, config)
    experiment_id = next(state.experiments)
    resources = config.get("resources") or {}
    _resource_int(resources, "priority", DEFAULT_PRIORITY)  # refused here if not a number
    name = config.get("name") or f"Experiment ({_petname(state)})"
    config = {**config, "name": name}
    # Saved with defaults filled: a priority not given stays null (expconf resources.json
    # "default": null); the scheduler reads it as its default_priority.
    config["resources"] = {"priority": None, **resources, "resource_pool": pool}
    experiment = Experiment(
        id=experiment_id,
        name=str(name),
        config=config,
        original_config=text,
        job_id=state.new_id("job"),
        pool=pool,
        user=owner,
        started=state.tick(),
        active=activate,
    )
    state.records[experiment_id] = experiment
    if activate:
        create_trial(state, experiment)
    return experiment, warnings


def create_trial(state: MasterState, experiment: Experiment) -> Task:
    """The experiment's searcher creates a trial: a task of the experiment's job, with its
    ``slots_per_trial``, pool and priority, queued. ApiError 9 for an experiment that has
    ended (its searcher has shut down) or is paused."""
    if experiment.ended is not None or not experiment.active:
        raise ApiError(9, f"experiment {experiment.id} is not active")
    resources = experiment.config["resources"]
    trial_id = next(state.trials)
    task = state.queue(
        f"Trial {trial_id} (Experiment {experiment.id})",
        _resource_int(resources, "slots_per_trial", 1),
        experiment.pool,
        "TRIAL",
        _resource_int(resources, "priority", DEFAULT_PRIORITY),
        experiment.user,
        experiment_id=experiment.id,
        job_id=experiment.job_id,
    )
    task.job_name, task.trial_id = experiment.name, trial_id
    experiment.trial_ids.append(trial_id)
    experiment.task_ids.append(task.task_id)
    return task


def _petname(state: MasterState) -> str:
    """A three-word name, as petname.Generate(3, "-") makes; deterministic here."""
    n = next(state.counter)
    return "-".join(
        (_ADVERBS[n % len(_ADVERBS)], _ADJECTIVES[n // 3 % len(_ADJECTIVES)], _NAMES[n % 7])
    )
