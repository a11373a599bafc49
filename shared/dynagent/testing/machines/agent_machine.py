"""One cloud VM for the tests: boot its user data on a real Docker Engine, watch the agent.

``AgentMachine`` stands in for one EC2 or GCE instance running the autoscaler's user data,
so a test proves that the boot script really starts Determined's agent and that the agent
reaches the master:

    with AgentMachine("aws", "i-0abc", gpus=8, master=master) as machine:
        machine.boot(user_data)
        machine.wait_for(lambda: machine.agent_container() is not None, timeout=20)

What it is made of, each in its own module: the machine's namespaces
(``machine_namespace``: private mounts and network, no route out), its Docker Engine
(``docker_engine``, with a stub NVIDIA hook for ``--gpus``), the instance metadata at
169.254.169.254 (``metadata_service``), the master's port reachable at 127.0.0.1 from the
machine and every container on it (``master_routes``), and the agent image under any name
a test asks for (``agent_image``).

The boot runs as cloud-init runs user data: the script, as root, with a plain PATH, its
output the machine's console log. Determined's boot ends with ``docker run`` in the
foreground, so a boot may never return while its agent runs: ``boot()`` starts it in the
background and the tests wait on conditions, bounded. Leaving the context stops it all:
the boot, containers, dockerd, servers, namespaces and temp files.

Needs root on Linux, ``dockerd`` and the ``docker`` client, ``busybox`` (Debian's
``docker.io`` and ``busybox-static``), ``unshare``, ``nsenter`` and ``ip``; ``available()``
says what is missing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

from dynagent.testing.determined.master import LocalDetermined
from dynagent.testing.machines import agent_image
from dynagent.testing.machines.docker_engine import DockerEngine
from dynagent.testing.machines.master_routes import MasterRoutes
from dynagent.testing.machines.metadata_service import (
    ADDRESS,
    PORT,
    Cloud,
    MetadataCall,
    MetadataService,
    aws_metadata,
    gcp_metadata,
)
from dynagent.testing.machines.namespace import MachineNamespace
from dynagent.testing.machines.netns import listen_in, netns_path

AGENT_CONTAINER: Final = "determined-agent"
# What cloud-init gives a user-data script (no venv, no test-runner variables).
BOOT_PATH: Final = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Where the machine keeps its user data (its /run is its own).
_USER_DATA: Final = "/run/dynagent/user-data"
STATE_ROOT: Final = "/var/tmp"  # not /tmp: the machine mounts its own /tmp
_TOOLS: Final = {
    "dockerd": "docker.io",
    "docker": "docker.io",
    "busybox": "busybox-static",
    "unshare": "util-linux",
    "nsenter": "util-linux",
    "ip": "iproute2",
    "curl": "curl",  # Determined's boot fetches the agent id with it
}


def available() -> tuple[bool, str]:
    """(True, "") where machines can run here; else False and what to install or fix."""
    if os.geteuid() != 0:
        return False, "agent machines need root (namespaces, mounts and dockerd)"
    missing = sorted({package for tool, package in _TOOLS.items() if shutil.which(tool) is None})
    if missing:
        return (
            False,
            f"agent machines need {', '.join(missing)} (apt-get install {' '.join(missing)})",
        )
    if not agent_image.static_busybox():
        return False, "agent machines need a static busybox (apt-get install busybox-static)"
    return True, ""


class AgentMachine:
    """One VM of ``cloud`` named ``instance`` (an EC2 instance id or a GCE instance name)
    with ``gpus`` GPUs, whose agents reach ``master``; a context manager."""

    def __init__(
        self,
        cloud: Cloud,
        instance: str,
        *,
        master: LocalDetermined,
        gpus: int = 0,
        zone: str | None = None,
        image_names: Sequence[str] = (agent_image.DEFAULT_IMAGE,),
    ) -> None:
        if cloud not in ("aws", "gcp"):
            raise ValueError(f"cloud {cloud!r}: aws or gcp")
        if gpus < 0:
            raise ValueError(f"gpus must be >= 0, not {gpus}")
        if not image_names:
            raise ValueError("image_names: at least one name for the agent image")
        self.cloud: Cloud = cloud
        self.instance = instance
        self.gpus = gpus
        self.zone = zone or ("us-west-2a" if cloud == "aws" else "us-central1-a")
        self._master = master
        self._image_names = tuple(image_names)
        self._state: Path | None = None
        self._namespace: MachineNamespace | None = None
        self._engine: DockerEngine | None = None
        self._metadata: MetadataService | None = None
        self._routes: MasterRoutes | None = None
        self._boot: subprocess.Popen[bytes] | None = None
        self._stopped = False
        self.started_seconds = 0.0

    # -- life cycle -------------------------------------------------------------------

    def __enter__(self) -> Self:
        began = time.monotonic()
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        self.started_seconds = time.monotonic() - began
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _start(self) -> None:
        self._state = Path(tempfile.mkdtemp(prefix="dynagent-machine-", dir=STATE_ROOT))
        self._namespace = MachineNamespace(self._state)
        values = (
            aws_metadata(self.instance, self.zone)
            if self.cloud == "aws"
            else gcp_metadata(self.instance, self.zone)
        )
        self._metadata = MetadataService(
            self.cloud, values, listen_in(netns_path(self._namespace.pid), ADDRESS, PORT)
        )
        self._engine = DockerEngine(self._namespace, self._state, self.gpus, self._state.name)
        self._engine.start()
        self._load_images()
        self._routes = MasterRoutes(self._namespace.pid, self._master.port, self._engine)
        self._routes.watch()

    def _load_images(self) -> None:
        first, *others = self._image_names
        self.engine.docker(
            "import",
            *[arg for change in agent_image.CHANGES for arg in ("--change", change)],
            str(agent_image.image_tar()),
            first,
        )
        for name in others:
            self.engine.docker("tag", first, name)

    def close(self) -> None:
        """Stop everything this machine started; safe to repeat."""
        self._stop_boot()
        routes, self._routes = self._routes, None
        if routes is not None:
            routes.close()
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()
        metadata, self._metadata = self._metadata, None
        if metadata is not None:
            metadata.close()
        namespace, self._namespace = self._namespace, None
        if namespace is not None:
            namespace.close()
        state, self._state = self._state, None
        if state is not None:
            shutil.rmtree(state, ignore_errors=True)

    @property
    def engine(self) -> DockerEngine:
        if self._engine is None:
            raise RuntimeError("the machine is not running")
        return self._engine

    @property
    def namespace(self) -> MachineNamespace:
        if self._namespace is None:
            raise RuntimeError("the machine is not running")
        return self._namespace

    # -- boot -------------------------------------------------------------------------

    def boot(self, user_data: str) -> None:
        """Run ``user_data`` as cloud-init runs a user-data script, in the background."""
        if self._boot is not None:
            raise RuntimeError("this machine has booted already")
        assert self._state is not None
        script = self.namespace.path(_USER_DATA)
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(user_data)
        script.chmod(0o700)
        self._run_boot("wb")

    def _run_boot(self, mode: str) -> None:
        with self._console_path.open(mode) as console:
            self._boot = subprocess.Popen(
                [*self.namespace.nsenter(), _USER_DATA],
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                cwd="/",
                env={"PATH": BOOT_PATH, "HOME": "/root", "LANG": "C.UTF-8", "USER": "root"},
                start_new_session=True,
            )

    @property
    def _console_path(self) -> Path:
        assert self._state is not None
        return self._state / "console.log"

    @property
    def console(self) -> str:
        """What the boot wrote so far (stdout and stderr), as the serial console shows."""
        path = self._console_path
        return path.read_text(errors="replace") if path.exists() else ""

    @property
    def boot_exit_code(self) -> int | None:
        """The boot script's exit code; None before boot() and while it runs."""
        return None if self._boot is None else self._boot.poll()

    def wait_for_boot(self, timeout: float = 30.0) -> int:
        """Wait (bounded) for the boot script to end; its exit code."""
        self.wait_for(lambda: self.boot_exit_code is not None, timeout, "the boot to end")
        code = self.boot_exit_code
        assert code is not None
        return code

    def _stop_boot(self) -> None:
        boot, self._boot = self._boot, None
        if boot is not None and boot.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(boot.pid, signal.SIGKILL)
        if boot is not None:
            boot.wait()

    # -- looking at it ----------------------------------------------------------------

    def wait_for(
        self, predicate: Callable[[], Any], timeout: float = 20.0, what: str = "a condition"
    ) -> Any:
        """Poll ``predicate`` until it returns something true; that. A TimeoutError after
        ``timeout`` seconds says what it waited for, the console and the agent's output."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"{self.instance}: waited {timeout:.0f} s for {what}; console:\n"
                    f"{self.console[-4000:]}\nagent container:\n{self._agent_story()}"
                )
            time.sleep(0.1)

    def _agent_story(self) -> str:
        """The agent container's state and last output, for a timeout's message."""
        if self._engine is None or not self._engine.running:
            return "(no engine)"
        info = self.agent_container()
        if info is None:
            return "(none)"
        state = info["State"]
        return f"{state['Status']} (exit code {state['ExitCode']})\n{self.agent_logs()[-2000:]}"

    def metadata_calls(self) -> list[MetadataCall]:
        return [] if self._metadata is None else self._metadata.calls()

    def agent_container(self, name: str = AGENT_CONTAINER) -> dict[str, Any] | None:
        """``docker inspect`` of the agent container, or None when there is none."""
        return self.engine.inspect(name)

    def agent_running(self, name: str = AGENT_CONTAINER) -> bool:
        info = self.agent_container(name)
        return info is not None and bool(info["State"]["Running"])

    def agent_exit_code(self, name: str = AGENT_CONTAINER) -> int | None:
        """The agent container's exit code once it has exited; None while it is created,
        running or restarting, or when there is none."""
        info = self.agent_container(name)
        if info is None or info["State"]["Status"] != "exited":
            return None
        return int(info["State"]["ExitCode"])

    def wait_for_agent_exit(self, timeout: float = 20.0, name: str = AGENT_CONTAINER) -> int:
        """Wait (bounded) for the agent container to exit; its exit code."""
        self.wait_for(lambda: self.agent_exit_code(name) is not None, timeout, f"{name} to exit")
        code = self.agent_exit_code(name)
        assert code is not None
        return code

    def agent_logs(self, name: str = AGENT_CONTAINER) -> str:
        """The agent container's output so far (stdout and stderr)."""
        result = subprocess.run(
            ["docker", "logs", name],
            env=self.engine.env,
            capture_output=True,
            check=False,
        )
        return (result.stdout + result.stderr).decode(errors="replace")

    def agent_exec(self, command: Sequence[str], name: str = AGENT_CONTAINER) -> str:
        """Run ``command`` in the agent container; its stdout (RuntimeError if it fails)."""
        return self.engine.docker("exec", name, *command)

    def docker(self, *args: str) -> str:
        """The docker client on this machine's engine; its stdout."""
        return self.engine.docker(*args)

    def network_names(self) -> list[str]:
        return sorted(self.engine.docker("network", "ls", "--format", "{{.Name}}").split())

    def routed_containers(self) -> list[str]:
        """Containers that reach the master now (through their own namespace's route)."""
        return [] if self._routes is None else self._routes.routed()

    def read_file(self, path: str) -> str:
        """A file as the machine sees it (its own /run, /tmp and private directories)."""
        return self.namespace.path(path).read_text(errors="replace")

    # -- events -----------------------------------------------------------------------

    @property
    def stopped(self) -> bool:
        """True between ``stop()`` and ``start()``."""
        return self._stopped

    def stop(self) -> None:
        """Stop the machine as the cloud's stop does, after the boot ended: it powers off
        with its disk kept, so its engine and every container stop, and images,
        containers and files stay; the agent's connection drops, and the master waits
        for it (``reconnecting``: the agent's id is the instance's, as every boot here
        sets it; an agent that never registered has nothing to drop).

        Simpler than a VM's stop: only the engine and its containers stop (nothing else
        runs once the boot ended), while the machine's namespaces, its metadata service
        and its route to the master stay up, unused; /run and /tmp keep their files
        where a VM's are empty at its next boot; and a stop before the boot ended, which
        would cut the boot short, is refused."""
        if self._boot is None or self._boot.poll() is None:
            raise RuntimeError("stop after the boot has ended")
        if self._stopped:
            raise RuntimeError("the machine is stopped already")
        self._stop_engine()
        self._stopped = True
        with contextlib.suppress(KeyError):
            self._master.reconnecting(self.instance)

    def start(self) -> None:
        """Start a stopped machine, as the cloud's start does (a warm pool's machine
        going into service): the engine starts (``--restart always`` containers
        return), and on GCE the startup script runs again, as it does at every boot
        (cloud-init runs EC2 user data once per instance, at its first boot)."""
        if not self._stopped:
            raise RuntimeError("start a stopped machine")
        self._start_engine()
        self._stopped = False
        if self.cloud == "gcp":
            self._boot = None
            self._run_boot("ab")

    def reboot(self) -> None:
        """A reboot as the cloud does it, after the boot ended: a stop then a start
        (see both for what this model leaves out), with no wait between."""
        self.stop()
        self.start()

    def restart_engine(self) -> None:
        """Stop dockerd and start it again in the same machine, as a service restart
        does to the engine: containers stop; ``--restart always`` ones return."""
        self._stop_engine()
        self._start_engine()

    def _stop_engine(self) -> None:
        routes = self._routes
        assert routes is not None
        routes.unwatch()
        self.engine.stop()

    def _start_engine(self) -> None:
        routes = self._routes
        assert routes is not None
        self.engine.start()
        routes.watch()
