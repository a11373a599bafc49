"""The agent's boot as the bash script a machine runs once up (EC2 user data, a GCE
``startup-script``), from an ``AgentBoot``.

It keeps the order of Determined's template: the admin's ``startup_script`` first (a
failure stops the boot before the agent, saying so), then the files, then ``docker run``.
Unlike the template it checks each step and says on the console what failed; waits for
the Docker Engine; creates a user-defined network that is missing (never one of Docker's
own); and, run again at a reboot (GCE runs its startup script at every boot), starts the
existing agent container instead of failing on its name.
"""

from __future__ import annotations

import shlex

from .contract import AGENT_CONTAINER, DIRECTORY, HOST_MOUNTS, STARTUP_SCRIPT, AgentBoot

# Networks the Docker Engine defines itself (``default`` is its default network's name
# in ``docker run --network``): given to ``docker run`` as they are, never created.
DOCKER_NETWORKS = frozenset({"default", "bridge", "host", "none"})
# How long the boot waits for the Docker Engine to answer, in seconds.
ENGINE_WAIT = 120

_PRELUDE = f"""\
#!/bin/bash
# Written by dynagent: Determined's agent boot (master/static/srv/agent_setup_script.sh.template).
set -uo pipefail

say() {{ echo "dynagent-boot: $*"; }}
fail() {{ echo "dynagent-boot: $* The agent is not started." >&2; exit 1; }}

mkdir -p {DIRECTORY} || fail "cannot create {DIRECTORY}."
"""

_ENGINE = f"""\
for _ in $(seq 1 {ENGINE_WAIT}); do
  docker info >/dev/null 2>&1 && break
  sleep 1
done
docker info >/dev/null 2>&1 || fail "the Docker Engine did not answer within {ENGINE_WAIT}s."

if docker container inspect {AGENT_CONTAINER} >/dev/null 2>&1; then
  say "the agent container exists already (a reboot): starting it."
  docker start {AGENT_CONTAINER} >/dev/null || fail "cannot start the existing agent container."
  exit 0
fi
"""

_SLOTS = """\
docker_args=()
case "$slot_type" in
  cuda)
    say "starting the agent with NVIDIA GPUs."
    docker_args+=(--gpus all -e DET_SLOT_TYPE=cuda) ;;
  cpu)
    say "starting the agent with CPU slots."
    docker_args+=(-e DET_SLOT_TYPE=cpu) ;;
  *)
    say "starting the agent without slots."
    docker_args+=(-e DET_SLOT_TYPE=none) ;;
esac
"""


def render(boot: AgentBoot, agent_id_command: str, machine_type_command: str = "") -> str:
    """The script. ``agent_id_command`` prints this machine's agent id (its metadata
    service); ``machine_type_command`` its machine type, needed only when the slot type
    depends on it."""
    parts = [_PRELUDE, _startup_script(boot.startup_script)]
    parts += [_write(file.path, file.content) for file in boot.files]
    parts += [_ENGINE, _agent_id(agent_id_command), _slot_type(boot, machine_type_command)]
    parts += [_SLOTS, _network(boot.network), _docker_run(boot)]
    return "\n".join(parts)


def _startup_script(content: str) -> str:
    return f"""\
{_write(STARTUP_SCRIPT, content)}
chmod +x {STARTUP_SCRIPT} || fail "cannot make startup_script executable."
{STARTUP_SCRIPT}
code=$?
if [ "$code" -ne 0 ]; then
  fail "startup_script failed with exit code $code."
fi
say "startup_script succeeded."
"""


def _write(path: str, content: str) -> str:
    # A quoted heredoc keeps the content byte for byte (no expansion), and is smaller
    # than base64: EC2 takes 16 KB of user data.
    marker = "DYNAGENT_EOF"
    while marker in content:
        marker += "_"
    body = content if content.endswith("\n") or not content else content + "\n"
    return (
        f"cat >{path} <<'{marker}' || fail \"cannot write {path}.\"\n{body}{marker}\n"
        f'say "wrote {path} ($(wc -c <{path}) bytes)."\n'
    )


def _agent_id(command: str) -> str:
    return f"""\
AGENT_ID=$({command})
[ -n "$AGENT_ID" ] || fail "cannot read this machine's id from its metadata service."
say "agent id: $AGENT_ID."
"""


def _slot_type(boot: AgentBoot, machine_type_command: str) -> str:
    if boot.slot_type is not None:
        return f"slot_type={boot.slot_type}\n"
    if not machine_type_command:
        raise ValueError("the slot type depends on the machine type: give its command")
    arms = "".join(
        f"  {shlex.quote(machine)}) slot_type={kind} ;;\n"
        for machine, kind in sorted(boot.slot_types.items())
    )
    return f"""\
MACHINE_TYPE=$({machine_type_command})
case "$MACHINE_TYPE" in
{arms}  *) fail "machine type '$MACHINE_TYPE' is none of the pool's." ;;
esac
"""


def _network(network: str) -> str:
    if network in DOCKER_NETWORKS or ":" in network:
        return ""
    name = shlex.quote(network)
    return f"""\
if ! docker network inspect {name} >/dev/null 2>&1; then
  docker network create {name} >/dev/null || fail "cannot create Docker network {name}."
  say "created Docker network {name}."
fi
"""


def _docker_run(boot: AgentBoot) -> str:
    lines = [
        f"docker run --detach --init --name {AGENT_CONTAINER}",
        *([" ".join(shlex.quote(o) for o in boot.log_options)] if boot.log_options else []),
        "--privileged --restart always",
        f"--network {shlex.quote(boot.network)} --runtime={shlex.quote(boot.runtime)}",
        '-e DET_AGENT_ID="$AGENT_ID"',
        *[f"-e {name}={shlex.quote(value)}" for name, value in boot.environment],
        *[f"-v {path}:{path}" for path in HOST_MOUNTS],
        *[f"-v {f.path}:{f.mounted_at}" for f in boot.files if f.mounted_at],
        '"${docker_args[@]}"',
        shlex.quote(boot.image),
    ]
    run = " \\\n  ".join(lines)
    done = f'say "the agent runs in container {AGENT_CONTAINER}."'
    return f'{run} >/dev/null || fail "docker run failed."\n{done}\n'
