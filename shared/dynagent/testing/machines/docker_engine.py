"""A Docker Engine (dockerd) inside one machine's namespaces, and the client that reaches it.

dockerd runs as a VM's would, on the default socket ``/var/run/docker.sock`` inside the
machine (the host reaches it through the holder's root, ``/proc/<pid>/root/run/...``),
with its data in the machine's temp dir, the ``vfs`` storage driver (works anywhere, no
registry needed: images come from ``docker import``), no default bridge and no iptables
rules, and containers' cgroups under a parent of the machine's own, so a machine's
leftovers can be found and ended.

GPUs and privileges: ``runtime_shims`` puts a stub NVIDIA hook (``--gpus``) and, where
this host withholds capabilities a VM has, a ``runc`` wrapper first on dockerd's PATH.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Final

from dynagent.testing.machines.namespace import MachineNamespace
from dynagent.testing.machines.runtime_shims import install_shims

DOCKERD: Final = "dockerd"
DOCKER: Final = "docker"
CGROUP_ROOT: Final = Path("/sys/fs/cgroup")
_START_SECONDS: Final = 20.0
_STOP_SECONDS: Final = 20.0


class DockerEngine:
    """dockerd in ``machine``; ``start()``, ``stop()`` and ``docker(...)``."""

    def __init__(self, machine: MachineNamespace, state: Path, gpus: int, name: str) -> None:
        self._machine = machine
        self._state = state
        self.cgroup_parent = name  # the holder ends what is left there if the test dies
        self._process: subprocess.Popen[bytes] | None = None
        self._shims = machine.inside(install_shims(state / "shims", gpus, machine.inside))
        self.log_path = state / "dockerd.log"
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "DOCKER_HOST": f"unix://{machine.path('/run/docker.sock')}",
            "DOCKER_CONFIG": str(state / "docker-config"),
        }

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start dockerd and wait (bounded) until it answers."""
        path = f"{self._shims}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
        command = [
            *self._machine.nsenter(),
            "env",
            f"PATH={path}",
            DOCKERD,
            f"--data-root={self._machine.inside(self._state / 'docker')}",
            "--storage-driver=vfs",
            "--bridge=none",
            "--iptables=false",
            "--ip6tables=false",
            f"--cgroup-parent=/{self.cgroup_parent}",
        ]
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
            )
        deadline = time.monotonic() + _START_SECONDS
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"dockerd exited at start: {self._log_tail()}")
            if self.docker_ok("version", "--format", "{{.Server.Version}}"):
                return
            time.sleep(0.05)
        raise RuntimeError(f"dockerd did not answer in {_START_SECONDS:.0f} s: {self._log_tail()}")

    def stop(self) -> None:
        """Stop dockerd as a VM's shutdown does: containers stop, ``--restart`` ones stay."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def close(self) -> None:
        """Remove every container, end dockerd, end whatever is left in its cgroups.

        dockerd is killed, not stopped: with no containers left a graceful stop only
        waits a second for containerd, and the machine's namespace ends the rest."""
        if self.running:
            ids = self.docker("ps", "-aq", check=False).split()
            if ids:
                self.docker("rm", "-f", *ids, check=False)
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            process.wait()
        _end_cgroup(self.cgroup_parent)

    def docker(self, *args: str, check: bool = True, input: bytes | None = None) -> str:
        """Run the docker client against this engine; its stdout."""
        result = subprocess.run(
            [DOCKER, *args], env=self.env, input=input, capture_output=True, check=False
        )
        if check and result.returncode != 0:
            command = " ".join(["docker", *args])
            raise RuntimeError(f"{command}: {result.stderr.decode(errors='replace').strip()}")
        return result.stdout.decode(errors="replace")

    def docker_ok(self, *args: str) -> bool:
        result = subprocess.run([DOCKER, *args], env=self.env, capture_output=True, check=False)
        return result.returncode == 0

    def inspect(self, name: str) -> dict[str, Any] | None:
        """``docker inspect`` of one container, or None when there is none by that name."""
        result = subprocess.run(
            [DOCKER, "container", "inspect", name], env=self.env, capture_output=True, check=False
        )
        if result.returncode != 0:
            return None
        found: list[dict[str, Any]] = json.loads(result.stdout)
        return found[0] if found else None

    def events(self, since: float, until: float, *filters: str) -> list[dict[str, Any]]:
        """The engine's events between two Unix times (``docker events``), each as its
        JSON, with ``filters`` such as ``type=image``. dockerd keeps its events in memory
        only: what it can tell begins at its last start."""
        args = [arg for kept in filters for arg in ("--filter", kept)]
        out = self.docker(
            "events",
            "--since",
            f"{since:.6f}",
            "--until",
            f"{until:.6f}",
            "--format",
            "{{json .}}",
            *args,
        )
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def _log_tail(self) -> str:
        lines = self.log_path.read_text(errors="replace").splitlines()
        return " | ".join(lines[-5:])


def _end_cgroup(parent: str) -> None:
    """Kill what is left in ``/<parent>`` of each cgroup v1 hierarchy, then remove it."""
    if not CGROUP_ROOT.is_dir():
        return
    for hierarchy in CGROUP_ROOT.iterdir():
        top = hierarchy / parent
        if not top.is_dir():
            continue
        for _ in range(100):
            groups = sorted((p for p in top.rglob("*") if p.is_dir()), reverse=True)
            pids = [int(pid) for g in [top, *groups] for pid in _procs(g)]
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            try:
                for group in groups:
                    group.rmdir()
                top.rmdir()
                break
            except OSError:
                time.sleep(0.05)


def _procs(group: Path) -> list[str]:
    try:
        return (group / "cgroup.procs").read_text().split()
    except OSError:
        return []
