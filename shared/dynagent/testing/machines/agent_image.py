"""A stand-in for Determined's agent image, built from this host's files with no registry.

The image keeps the contract a boot script relies on (Determined's ``agent/Dockerfile``
and ``agent/packaging/entrypoint.sh``, read, not copied): the entrypoint runs
``/usr/local/determined/container_startup_script`` when one is there (made executable
first; if either step fails the container exits 1 with a message), then execs
``/usr/bin/determined-agent`` with the container's arguments (``CMD ["run"]``).

The agent itself is a busybox shell script, far simpler than Determined's Go agent: it
reads the same settings (``DET_*`` variables over ``/etc/determined/agent.yaml``'s top-level
keys), counts GPUs with ``nvidia-smi -L`` (which the machine's stub NVIDIA hook puts in
the container for ``--gpus``), and registers over plain HTTP (``POST /agents?...``, then a
heartbeat a second) where the real agent holds a websocket. It retries an unreachable
master ``DET_AGENT_RECONNECT_ATTEMPTS`` times ``DET_AGENT_RECONNECT_BACKOFF`` seconds apart
and exits 1 after, or at once when the master refuses it. Its first 3 s of failures do not
count: the machine's route to the master (``master_routes``) appears a moment after the
container starts, where a VPC route is there before it.

The root filesystem is busybox-static plus ``/bin/bash`` and its libraries; the tar is
built once per process (``image_tar()``) and imported into each machine's engine.
"""

from __future__ import annotations

import atexit
import io
import shutil
import subprocess
import tarfile
import tempfile
import threading
from pathlib import Path
from typing import Final

DEFAULT_IMAGE: Final = "determinedai/determined-agent:0.38.0"
ENTRYPOINT: Final = "/run/determined/workdir/entrypoint.sh"
AGENT: Final = "/usr/bin/determined-agent"
BUSYBOX: Final = "/bin/busybox"
BASH: Final = "/bin/bash"
# `docker import --change` lines: what Determined's Dockerfile declares for the image.
CHANGES: Final = (
    f'ENTRYPOINT ["{ENTRYPOINT}"]',
    'CMD ["run"]',
    "WORKDIR /run/determined/workdir",
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=utility,compute",
)

ENTRYPOINT_SCRIPT: Final = """#!/bin/bash
# dynagent's agent image: run the container startup script if one was given, then the agent.
startup=/usr/local/determined/container_startup_script
if [ -f "$startup" ]; then
    if ! chmod +x "$startup"; then
        echo "entrypoint: cannot make $startup executable" >&2
        exit 1
    fi
    "$startup"
    code=$?
    if [ "$code" -ne 0 ]; then
        echo "entrypoint: $startup failed with exit code $code" >&2
        exit 1
    fi
    echo "entrypoint: $startup succeeded"
fi
exec /usr/bin/determined-agent "$@"
"""

AGENT_SCRIPT: Final = r"""#!/bin/sh
# dynagent's stand-in for Determined's agent: register over HTTP, then heartbeat.
trap 'kill $! 2>/dev/null; exit 0' TERM INT
conf=/etc/determined/agent.yaml

# setting ENV_NAME yaml_key default: the variable, else the config file's key, else default
setting() {
    eval "value=\${$1:-}"
    if [ -z "$value" ] && [ -f "$conf" ]; then
        value=$(sed -n "s/^$2:[[:space:]]*//p" "$conf" | head -n 1 | tr -d "\"'")
    fi
    echo "${value:-$3}"
}

pause() {
    sleep "$1" &
    wait $!
}

fail() {
    echo "determined-agent: $*" >&2
    exit 1
}

[ "${1:-}" = run ] || fail "usage: determined-agent run"
host=$(setting DET_MASTER_HOST master_host "")
port=$(setting DET_MASTER_PORT master_port 8080)
id=$(setting DET_AGENT_ID agent_id "$(hostname)")
pool=$(setting DET_RESOURCE_POOL resource_pool default)
slot_type=$(setting DET_SLOT_TYPE slot_type auto)
tls=$(setting DET_SECURITY_TLS_ENABLED tls false)
cert=$(setting DET_SECURITY_TLS_MASTER_CERT tls_master_cert "")
attempts=$(setting DET_AGENT_RECONNECT_ATTEMPTS agent_reconnect_attempts 5)
backoff=$(setting DET_AGENT_RECONNECT_BACKOFF agent_reconnect_backoff 5)
[ -n "$host" ] || fail "no master host (DET_MASTER_HOST or master_host)"

gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
    gpus=$(nvidia-smi -L | grep -c '^GPU ')
fi
case "$slot_type" in
    cuda | gpu)
        [ "$gpus" -gt 0 ] || fail "slot type $slot_type but no CUDA devices are visible"
        slot_type=cuda slots=$gpus ;;
    auto)
        if [ "$gpus" -gt 0 ]; then slot_type=cuda slots=$gpus; else slot_type=cpu slots=1; fi ;;
    cpu) slots=1 ;;
    none) slots=0 ;;
    *) fail "unknown slot type $slot_type" ;;
esac

scheme=http
if [ "$tls" = true ]; then
    [ -n "$cert" ] && [ -f "$cert" ] || fail "TLS is on but the master cert '$cert' is missing"
    scheme=https
fi
base="$scheme://$host:$port"
query="id=$id&resource_pool=$pool&slots=$slots&slot_type=$slot_type"
echo "determined-agent: $id, $slots $slot_type slot(s), pool $pool, master $base"

tries=0
grace=15 # 3 s for the route to the master to appear before failures count
while :; do
    if error=$(wget -q -O /dev/null --post-data "" "$base/agents?$query" 2>&1); then
        echo "determined-agent: registered with the master"
        tries=0
        beat="$base/agents/$id/heartbeat"
        while pause 1 && wget -q -O /dev/null --post-data "" "$beat" 2>/dev/null; do :; done
        echo "determined-agent: lost the master; reconnecting"
        continue
    fi
    case "$error" in
        *"server returned error"*) fail "the master refused the agent: $error" ;;
    esac
    if [ "$grace" -gt 0 ]; then
        grace=$((grace - 1))
        pause 0.2
        continue
    fi
    tries=$((tries + 1))
    [ "$tries" -le "$attempts" ] || fail "master unreachable after $attempts attempts: $error"
    echo "determined-agent: master unreachable ($error); retry $tries/$attempts in ${backoff}s"
    pause "$backoff"
done
"""

_PASSWD: Final = "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/:/bin/false\n"
_GROUP: Final = "root:x:0:\nnogroup:x:65534:\n"
_DIRS: Final = ("etc", "proc", "sys", "dev", "root", "usr/bin", "usr/sbin", "var", "lib64")

_lock = threading.Lock()
_cached: Path | None = None


def image_tar() -> Path:
    """The root filesystem tar, built on first use and removed when the process exits."""
    global _cached
    with _lock:
        if _cached is None:
            directory = Path(tempfile.mkdtemp(prefix="dynagent-agent-image-"))
            atexit.register(shutil.rmtree, directory, True)
            _cached = build_rootfs(directory / "rootfs.tar")
        return _cached


def build_rootfs(path: Path) -> Path:
    """Write the agent image's root filesystem to the tar at ``path``."""
    with tarfile.open(path, "w") as tar:
        for name in _DIRS:
            _add_dir(tar, name, 0o755)
        _add_dir(tar, "tmp", 0o1777)
        _add_file(tar, "etc/passwd", _PASSWD.encode(), 0o644)
        _add_file(tar, "etc/group", _GROUP.encode(), 0o644)
        _add_host_file(tar, BUSYBOX, BUSYBOX)
        for applet in _busybox_applets():
            if applet not in ("busybox", "bash"):
                _add_link(tar, f"bin/{applet}", "busybox")
        _add_host_file(tar, BASH, BASH)
        for library in _libraries(BASH):
            _add_host_file(tar, library, library)
        _add_file(tar, ENTRYPOINT.lstrip("/"), ENTRYPOINT_SCRIPT.encode(), 0o755)
        _add_file(tar, AGENT.lstrip("/"), AGENT_SCRIPT.encode(), 0o755)
    return path


def static_busybox() -> bool:
    """Whether ``/bin/busybox`` runs without libraries, as the image needs (Debian's
    ``busybox-static``; the plain ``busybox`` package links libc)."""
    if not Path(BUSYBOX).is_file():
        return False
    result = subprocess.run(["ldd", BUSYBOX], capture_output=True, check=False)
    return result.returncode != 0


def _busybox_applets() -> list[str]:
    out = subprocess.run([BUSYBOX, "--list"], capture_output=True, text=True, check=True)
    return sorted({line.strip() for line in out.stdout.splitlines() if line.strip()})


def _libraries(binary: str) -> list[str]:
    """The absolute library paths ``ldd`` lists for ``binary`` (the loader included)."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True)
    found = []
    for line in out.stdout.splitlines():
        for word in line.split():
            if word.startswith("/"):
                found.append(word)
                break
    return found


def _add_dir(tar: tarfile.TarFile, name: str, mode: int) -> None:
    parts = name.split("/")
    for depth in range(1, len(parts) + 1):
        path = "/".join(parts[:depth])
        if path not in tar.getnames():
            info = tarfile.TarInfo(path)
            info.type = tarfile.DIRTYPE
            info.mode = mode
            tar.addfile(info)


def _add_file(tar: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
    _add_dir(tar, name.rsplit("/", 1)[0], 0o755)
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    tar.addfile(info, io.BytesIO(data))


def _add_host_file(tar: tarfile.TarFile, host_path: str, name: str) -> None:
    """A host file (symlinks followed) stored as a regular file at ``name``."""
    _add_file(tar, name.lstrip("/"), Path(host_path).resolve().read_bytes(), 0o755)


def _add_link(tar: tarfile.TarFile, name: str, target: str) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.SYMTYPE
    info.linkname = target
    tar.addfile(info)
