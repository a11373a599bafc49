"""Programs put first on a machine's dockerd PATH, to make this host look like a GPU VM.

* ``nvidia-container-runtime-hook`` (machines with GPUs only): with it on PATH the
  engine registers its NVIDIA driver, so ``docker run --gpus ...`` works as on a GPU VM
  and ``docker inspect`` shows the device request. runc calls it before the container
  starts; it writes ``/usr/bin/nvidia-smi`` into the container's root filesystem, listing
  the GPUs ``NVIDIA_VISIBLE_DEVICES`` selects (``all``, ids, ``none``). Far simpler than
  NVIDIA's hook: no device nodes, no driver libraries, just GPUs the agent stand-in can
  count with ``nvidia-smi -L``. A machine without GPUs has no hook, so there, as on a VM
  without NVIDIA's toolkit, ``--gpus`` fails ("could not select device driver").
* ``runc`` (only where this host's capability bounding set lacks some capability, as in
  a sandboxed VM): a ``--privileged`` container asks for every capability, which runc
  cannot grant here though a cloud VM's root can. The wrapper drops the ones this host
  lacks from the container's spec at ``create`` (and from a process's at ``exec``) and
  runs the real runc; every other runc command goes straight through.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Final

HOOK_NAME: Final = "nvidia-container-runtime-hook"
# Linux capabilities by number (capability.h), as OCI specs name them.
CAPABILITIES: Final = (
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
)

_HOOK: Final = '''#!{python}
"""A machine's stub NVIDIA hook (dynagent.testing.machines.runtime_shims): {gpus} GPU(s)."""
import json, os, sys

GPUS = {gpus}
if sys.argv[1:2] == ["prestart"]:
    bundle = json.load(sys.stdin)["bundle"]
    with open(os.path.join(bundle, "config.json")) as file:
        config = json.load(file)
    root = os.path.join(bundle, config["root"]["path"])
    env = dict(e.split("=", 1) for e in config.get("process", {{}}).get("env", []) if "=" in e)
    visible = env.get("NVIDIA_VISIBLE_DEVICES", "")
    if visible == "all":
        ids = list(range(GPUS))
    else:
        ids = [int(x) for x in visible.split(",") if x.strip().isdigit() and int(x) < GPUS]
    lines = "".join(
        "GPU %d: NVIDIA A100-SXM4-80GB (UUID: GPU-%08d-0000-0000-0000-000000000000)\\n" % (i, i)
        for i in ids
    )
    os.makedirs(os.path.join(root, "usr/bin"), exist_ok=True)
    path = os.path.join(root, "usr/bin/nvidia-smi")
    with open(path, "w") as file:
        file.write("#!/bin/sh\\ncat <<'EOF'\\n" + lines + "EOF\\n")
    os.chmod(path, 0o755)
'''

_RUNC: Final = """#!/bin/sh
# dynagent.testing.machines.runtime_shims: drop capabilities this host lacks, then run runc.
for arg in "$@"; do
    case "$arg" in create | exec) exec {python} {filter} {runc} "$@" ;; esac
done
exec {runc} "$@"
"""

_RUNC_FILTER: Final = '''"""Drop {dropped} from a container's (create) or a process's (exec)
capability sets, then exec runc."""
import json, os, sys

DROPPED = set({dropped!r})
runc, args = sys.argv[1], sys.argv[2:]


def value(*flags):
    for flag in flags:
        if flag in args and args.index(flag) + 1 < len(args):
            return args[args.index(flag) + 1]
    return None


process_file = value("--process", "-p")
if process_file is not None:
    path, key = process_file, None
else:
    path, key = os.path.join(value("--bundle", "-b") or ".", "config.json"), "process"
with open(path) as file:
    spec = json.load(file)
process = spec if key is None else spec.get(key, {{}})
sets = process.get("capabilities") or {{}}
for name, caps in sets.items():
    sets[name] = [cap for cap in caps if cap not in DROPPED]
with open(path, "w") as file:
    json.dump(spec, file)
os.execv(runc, [runc, *args])
'''


def missing_capabilities() -> list[str]:
    """The capabilities (``CAP_...``) this process's bounding set lacks."""
    status = Path("/proc/self/status").read_text()
    bounding = int(status.split("CapBnd:", 1)[1].split()[0], 16)
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    names = CAPABILITIES[: last + 1]
    return [f"CAP_{name}" for number, name in enumerate(names) if not bounding >> number & 1]


def install_shims(directory: Path, gpus: int, inside: Callable[[Path], str]) -> Path:
    """Write the shims this machine needs into ``directory``; the directory. ``inside``
    maps a host path to where the machine (its dockerd and runc) sees it."""
    directory.mkdir(parents=True, exist_ok=True)
    if gpus > 0:
        _write(directory / HOOK_NAME, _HOOK.format(python=_interpreter(), gpus=gpus))
    dropped = missing_capabilities()
    runc = shutil.which("runc")
    if dropped and runc is not None:
        filter_path = directory / "runc-filter.py"
        filter_path.write_text(_RUNC_FILTER.format(dropped=sorted(dropped)))
        _write(
            directory / "runc",
            _RUNC.format(python=_interpreter(), filter=inside(filter_path), runc=runc),
        )
    return directory


def _write(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def _interpreter() -> str:
    """A Python the machine can run (the shims use its standard library only): the one
    behind this process's virtual environment. A checkout under /tmp or /var/tmp has its
    venv there, which the machine's own tmpfs covers."""
    real = os.path.realpath(sys.executable)
    if not real.startswith(("/tmp/", "/var/tmp/")):
        return real
    system = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
    if system is None:
        raise RuntimeError(f"no Python outside /tmp for the machine's shims (have {real})")
    return system
