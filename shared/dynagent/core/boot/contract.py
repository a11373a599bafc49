"""What Determined's boot script gives its agent, as data: compare it line by line with
``master/static/srv/agent_setup_script.sh.template`` in determined-ai/determined, filled
in by ``provisioner/aws/aws.go`` and ``provisioner/gcp/gcp.go`` ``New``.

* Files under /usr/local/determined: the admin's ``startup_script`` (run first, on the
  machine), ``agent.yaml`` from ``agent_config_file_contents`` (the agent's
  /etc/determined/agent.yaml), the master's certificate for a TLS master, and the
  ``container_startup_script``, mounted read-write: the agent image's entrypoint
  (``agent/packaging/entrypoint.sh``) makes it executable, runs it, and exits 1 if it
  fails.
* The slot type by the machine's GPU count (provconfig ``SlotType``): ``cuda`` with
  ``--gpus all`` when it has GPUs, else ``cpu`` when ``cpu_slots_allowed``, else
  ``none``; passed as ``DET_SLOT_TYPE``.
* ``docker run --init --privileged --restart always`` on ``agent_docker_network`` with
  ``agent_docker_runtime``, the ``DET_*`` environment, the host's shutdown, systemd,
  dbus, cgroup and Docker socket mounted, and the log driver (``log_group``/``log_stream``
  on AWS, ``use_cloud_logging`` on GCP: ``BuildDockerLogString``).

Where dynagent differs on purpose: the agent id is the instance id (EC2) or name (GCE)
in both clouds, as Determined's provisioners also set it; the container runs detached,
so the boot finishes; and ``render`` adds checks that make a failed boot say why.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from dynagent.core.config import AwsProvider, GcpProvider, ProviderConfig

from .master import MasterAddress

SlotType = Literal["cuda", "cpu", "none"]

DIRECTORY = "/usr/local/determined"
STARTUP_SCRIPT = f"{DIRECTORY}/startup_script"
AGENT_CONFIG = f"{DIRECTORY}/agent.yaml"
MASTER_CERT = f"{DIRECTORY}/master.crt"
CONTAINER_STARTUP_SCRIPT = f"{DIRECTORY}/container_startup_script"
AGENT_CONTAINER = "determined-agent"

# Host paths the agent container sees at the same place: it may shut the machine down
# (systemd over dbus), manages task containers through the Docker socket, and reads
# cgroups for resource accounting.
HOST_MOUNTS = (
    "/usr/sbin/shutdown",
    "/run/systemd/system",
    "/var/run/dbus/system_bus_socket",
    "/sys/fs/cgroup",
    "/var/run/docker.sock",
)


@dataclass(frozen=True)
class BootFile:
    """A file the boot writes on the machine, and where the agent container sees it."""

    path: str
    content: str
    mounted_at: str | None = None


@dataclass(frozen=True)
class AgentBoot:
    """Everything the boot gives the agent; ``render`` turns it into a script."""

    startup_script: str
    files: tuple[BootFile, ...]
    # The slot type by machine type; one entry when every machine the script may boot
    # has the same (a fleet's launch template serves several types).
    slot_types: Mapping[str, SlotType]
    environment: tuple[tuple[str, str], ...]
    network: str
    runtime: str
    image: str
    log_options: tuple[str, ...]

    @property
    def slot_type(self) -> SlotType | None:
        """The one slot type of every machine, or None when it depends on the machine."""
        kinds = set(self.slot_types.values())
        return kinds.pop() if len(kinds) == 1 else None


def machine_gpus(provider: ProviderConfig) -> dict[str, int]:
    """GPUs of each machine type the pool may launch: Determined's slot table (or the
    pool's ``instance_slots``, which Determined adds to that table) on AWS, ``gpu_num``
    on GCP."""
    if isinstance(provider, GcpProvider):
        return {m.machine_type: m.gpu_num for m in provider.machines()}
    types = provider.offerings.instance_types if provider.offerings else (provider.instance_type,)
    return {t: provider.gpus_of(t) for t in types}


def slot_type(gpus: int, cpu_slots_allowed: bool) -> SlotType:
    """Determined's rule (provconfig ``AWSClusterConfig.SlotType``, and GCP's): by GPUs."""
    if gpus > 0:
        return "cuda"
    return "cpu" if cpu_slots_allowed else "none"


def agent_boot(
    provider: ProviderConfig, pool: str, gpus: Mapping[str, int], master: MasterAddress
) -> AgentBoot:
    """The boot of a machine of ``provider``'s pool; ``gpus`` maps each machine type the
    script may boot to its GPUs; ``master`` is resolved (no alias left)."""
    files = [BootFile(AGENT_CONFIG, _agent_config(provider), "/etc/determined/agent.yaml")]
    environment = [
        ("DET_MASTER_HOST", master.host),
        ("DET_MASTER_PORT", str(master.port)),
        ("DET_SECURITY_TLS_MASTER_CERT_NAME", provider.master_cert_name or ""),
        ("DET_RESOURCE_POOL", pool),
        ("DET_AGENT_RECONNECT_ATTEMPTS", str(provider.agent_reconnect_attempts)),
        ("DET_AGENT_RECONNECT_BACKOFF", str(provider.agent_reconnect_backoff)),
    ]
    if master.tls:
        # Determined passes the cert whenever its master serves TLS; a master whose
        # certificate a public CA signed needs none, but the agent must still speak TLS.
        environment.append(("DET_SECURITY_TLS_ENABLED", "true"))
        if provider.master_cert:
            files.append(BootFile(MASTER_CERT, _with_newline(provider.master_cert), MASTER_CERT))
            environment.append(("DET_SECURITY_TLS_MASTER_CERT", MASTER_CERT))
    files.append(
        BootFile(
            CONTAINER_STARTUP_SCRIPT, provider.container_startup_script, CONTAINER_STARTUP_SCRIPT
        )
    )
    return AgentBoot(
        startup_script=provider.startup_script,
        files=tuple(files),
        slot_types={
            machine: slot_type(count, provider.cpu_slots_allowed) for machine, count in gpus.items()
        },
        environment=tuple(environment),
        network=provider.agent_docker_network,
        runtime=provider.agent_docker_runtime,
        image=provider.agent_docker_image,
        log_options=log_options(provider),
    )


def log_options(provider: ProviderConfig) -> tuple[str, ...]:
    """The agent container's log driver: provconfig ``BuildDockerLogString``."""
    if isinstance(provider, AwsProvider):
        if not provider.log_group:
            return ()
        options = ["--log-driver=awslogs", "--log-opt", f"awslogs-group={provider.log_group}"]
        if provider.log_stream:
            options += ["--log-opt", f"awslogs-stream={provider.log_stream}"]
        return tuple(options)
    if isinstance(provider, GcpProvider) and provider.use_cloud_logging:
        return ("--log-driver", "gcplogs")
    return ()


def _agent_config(provider: ProviderConfig) -> str:
    # Determined keeps agent_config_file_contents as raw JSON and writes those bytes as
    # agent.yaml (JSON is YAML); nothing set is an empty file.
    contents = provider.agent_config_file_contents
    return "" if contents is None else json.dumps(contents, indent=2) + "\n"


def _with_newline(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"
