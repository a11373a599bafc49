"""The namespaces that stand in for one VM: a private mount and network namespace.

A holder process (``unshare --mount --net --propagation private``, a shell that waits
while the test process lives) owns them; everything of the machine (its dockerd, its boot
script, their children) joins them with ``nsenter``. Inside:

* ``lo`` up, with 169.254.169.254/32 on it, where the metadata service listens; no other
  interface, so nothing the machine runs can reach the host's network or beyond.
* ``/run``, ``/tmp`` and ``/var/tmp`` fresh tmpfs: the engine's socket
  (``/var/run/docker.sock``), ``/run/systemd/system`` (there, as on a systemd VM) and
  whatever a boot script puts there are the machine's own. The machine's state dir (on
  the host, under /var/tmp) is bound at ``/run/dynagent/state`` for its dockerd.
* overlayfs over the host directories a boot script writes to (``PRIVATE_DIRS``), their
  writes kept in a temp dir: the machine sees the host's files, the host never sees the
  machine's writes.
* ``/etc/hosts`` maps ``metadata.google.internal`` to 169.254.169.254, as on GCE.

Simpler than a VM: one kernel, the host's users, processes visible from the host, and
directories outside ``PRIVATE_DIRS`` shared with it. ``close()`` ends every process left
in the namespaces, so the mounts and interfaces go with them; should the test process
die without closing, the holder does it (within a second) and removes the state dir.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Final

from dynagent.testing.machines.metadata_service import ADDRESS

PRIVATE_DIRS: Final = (
    "/etc",
    "/usr/local",
    "/usr/sbin",
    "/usr/bin",
    "/usr/lib/systemd",
    "/opt",
    "/root",
    "/home",
    "/var/lib",
    "/var/log",
    "/var/cache",
)
_TMP_DIRS: Final = ("/tmp", "/var/tmp")
GCE_METADATA_HOST: Final = "metadata.google.internal"
_STOP_SECONDS: Final = 5.0
_UNSHARE: Final = ("unshare", "--mount", "--net", "--propagation", "private")
# Where the machine sees its state dir (bound there, as its /var/tmp is its own).
STATE_INSIDE: Final = "/run/dynagent/state"
# The holder keeps the namespaces while the test process ($1) lives. Should that process
# die without closing the machine (killed, timed out), the holder ends what the machine
# runs: processes in the cgroups named $2 (containers) and in its mount namespace, then
# removes those cgroups and the machine's state dir ($2 too, relative to the holder's
# working directory: the host's /var/tmp, which the machine's own covers), unmounting what
# is mounted under $3 (the state dir as the machine sees it) first.
_HOLDER: Final = """
while kill -0 "$1" 2>/dev/null; do sleep 1; done
own=$(readlink /proc/$$/ns/mnt)
for round in 1 2 3 4 5 6 7 8 9 10; do
    left=0
    for group in /sys/fs/cgroup/*/"$2"; do
        cat "$group"/cgroup.procs "$group"/*/cgroup.procs 2>/dev/null
    done | xargs -r kill -9 2>/dev/null
    for proc in /proc/[0-9]*; do
        pid=${proc#/proc/}
        if [ "$pid" != $$ ] && [ "$(readlink "$proc/ns/mnt" 2>/dev/null)" = "$own" ]; then
            kill -9 "$pid" 2>/dev/null && left=1
        fi
    done
    [ "$left" = 0 ] && break
    sleep 0.2
done
find /sys/fs/cgroup/*/"$2" -depth -type d -exec rmdir {} + 2>/dev/null
awk -v dir="$3" 'index($2, dir) == 1 {print $2}' /proc/self/mounts | sort -r |
    while read -r point; do umount -l "$point"; done
rm -rf "./$2"
"""


class MachineNamespace:
    """The holder process and its namespaces, set up under ``state`` (a temp dir)."""

    def __init__(self, state: Path) -> None:
        self._state = state
        self._holder = subprocess.Popen(
            [*_UNSHARE, "sh", "-c", _HOLDER, "holder", str(os.getpid()), state.name, STATE_INSIDE],
            cwd=state.parent,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.pid = self._holder.pid
        try:
            self._wait_for_namespaces()
            self._setup()
        except BaseException:
            self.close()
            raise

    def nsenter(self) -> list[str]:
        """The command prefix that runs a command inside the machine."""
        return ["nsenter", "-t", str(self.pid), "-m", "-n"]

    def path(self, inside: str) -> Path:
        """A path inside the machine, as the host reaches it (through the holder's root)."""
        return Path(f"/proc/{self.pid}/root") / inside.lstrip("/")

    def inside(self, state_path: Path) -> str:
        """Where the machine sees ``state_path``, a path in its state dir."""
        return f"{STATE_INSIDE}/{state_path.relative_to(self._state)}"

    @property
    def mount_ns(self) -> int:
        return os.stat(f"/proc/{self.pid}/ns/mnt").st_ino

    def close(self) -> None:
        """End every process in the machine's mount namespace, the holder first (so it
        starts nothing more)."""
        # An open handle keeps the namespace, and so its inode number, until every member
        # is gone: a freed number can be reused by another machine's namespace (another
        # test process's), whose processes the kill would then hit.
        try:
            handle: int | None = os.open(f"/proc/{self.pid}/ns/mnt", os.O_RDONLY)
            mount_ns: int | None = self.mount_ns
        except OSError:
            handle, mount_ns = None, None
        try:
            if self._holder.poll() is None:
                self._holder.kill()
            self._holder.wait(timeout=_STOP_SECONDS)
            if mount_ns is not None:
                _kill_members(mount_ns)
        finally:
            if handle is not None:
                os.close(handle)

    def _wait_for_namespaces(self) -> None:
        own = os.stat("/proc/self/ns/net").st_ino
        deadline = time.monotonic() + _STOP_SECONDS
        while time.monotonic() < deadline:
            if self._holder.poll() is not None:
                raise RuntimeError("unshare exited: cannot make the machine's namespaces")
            try:
                if os.stat(f"/proc/{self.pid}/ns/net").st_ino != own:
                    return
            except FileNotFoundError:
                pass
            time.sleep(0.005)
        raise RuntimeError("the machine's namespaces did not appear")

    def _setup(self) -> None:
        lines = [
            "set -e",
            "ip link set lo up",
            f"ip addr add {ADDRESS}/32 dev lo",
            "mount -t tmpfs -o mode=755 tmpfs /run",
            f"mkdir -p /run/systemd/system /run/lock {STATE_INSIDE}",
            f"mount --bind {self._state} {STATE_INSIDE}",
        ]
        for index, directory in enumerate(d for d in PRIVATE_DIRS if os.path.isdir(d)):
            upper, work = self._state / "upper" / str(index), self._state / "work" / str(index)
            upper.mkdir(parents=True)
            work.mkdir(parents=True)
            lines.append(
                f"mount -t overlay overlay -o lowerdir={directory},upperdir={upper},"
                f"workdir={work} {directory}"
            )
        lines += [f"mount -t tmpfs -o mode=1777 tmpfs {d}" for d in _TMP_DIRS if os.path.isdir(d)]
        lines.append(f"echo '{ADDRESS} {GCE_METADATA_HOST}' >> /etc/hosts")
        result = subprocess.run(
            [*self.nsenter(), "sh", "-c", "\n".join(lines)],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"cannot set up the machine: {result.stderr.strip()}")


def _kill_members(mount_ns: int) -> None:
    """SIGKILL every process whose mount namespace is ``mount_ns``, and wait (bounded)
    until none is left."""
    deadline = time.monotonic() + _STOP_SECONDS
    while time.monotonic() < deadline:
        members = _pids_in(mount_ns)
        if not members:
            return
        for pid in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)


def _pids_in(mount_ns: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}/ns/mnt").st_ino == mount_ns:
                found.append(int(entry))
        except OSError:
            continue
    return found
