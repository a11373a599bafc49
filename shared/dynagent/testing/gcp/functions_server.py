"""Local servers as subprocesses: a Cloud Function under the real functions-framework.

``FunctionServer`` runs ``functions-framework --target NAME --source FILE`` on 127.0.0.1
and a free port, with the environment it is given, the way Cloud Run functions runs the
same code: one process, its own HTTP server. A Pub/Sub push subscription (the emulator's,
see ``dynagent.testing.gcp.pubsub``) pointed at ``push_endpoint(topic)`` delivers messages to
it as Pub/Sub pushes to Cloud Run do; functions-framework turns a raw push body into the
``messagePublished`` CloudEvent a cloudevent function takes.

``ServerProcess`` is the part both local servers share: a command started in a process
group of its own, its output kept in a file, a bounded wait until it answers, and a stop
that ends the whole group (functions-framework forks gunicorn workers, the emulator a
JVM), so nothing outlives the server that started it.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final, Self

from dynagent.testing.loopback import LOOPBACK, Service

# Polling period while waiting for a server to answer or a process group to empty.
_POLL_SECONDS: Final = 0.05
_TAIL_LINES: Final = 40


class ServerStartError(RuntimeError):
    """A local server did not come up; the message carries the end of its output."""


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes in a process group, read from /proc.

    Zombies are skipped: an orphan reparented to an init that reaps late is already dead.
    Without /proc (not Linux) a signal-0 probe answers whether the group has anyone left.
    """
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        return [pgid]
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # it exited while we looked
        # Fields after the parenthesised command: state, ppid, pgrp, ...
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


class ServerProcess:
    """One server command in its own process group, with its output in a log file."""

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        log_path: Path,
        stop_signal: signal.Signals = signal.SIGTERM,
    ) -> None:
        self.name = name
        self.stop_signal = stop_signal
        self.command = list(command)
        self._env = dict(env)
        self._cwd = cwd
        self.log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def start(self) -> None:
        with self.log_path.open("wb") as log:
            # A new session makes the server the leader of its own process group, so
            # stop() can signal everything it forks, and Ctrl-C in a terminal running the
            # tests does not reach it half-way.
            self._process = subprocess.Popen(
                self.command,
                cwd=self._cwd,
                env=self._env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_until(self, ready: Callable[[], bool], timeout: float) -> None:
        """Poll ``ready`` until it is true; raise ServerStartError on exit or timeout."""
        deadline = time.monotonic() + timeout
        while True:
            code = self._process.poll() if self._process else -1
            if code is not None:
                raise self._start_error(f"exited with code {code} before it answered")
            if ready():
                return
            if time.monotonic() > deadline:
                raise self._start_error(f"did not answer within {timeout:g}s")
            time.sleep(_POLL_SECONDS)

    def stop(self, grace: float = 10.0) -> None:
        """End the whole process group: ``stop_signal``, then SIGKILL after ``grace`` s.

        Returns once the leader is reaped and no live process is left in the group;
        raises RuntimeError naming any that survived SIGKILL (that would be a leak).
        """
        process, self._process = self._process, None
        if process is None:
            return
        pgid = process.pid  # the session leader's pid is the group id
        _signal_group(pgid, self.stop_signal)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            _signal_group(pgid, signal.SIGKILL)
            process.wait()
        if _wait_group_empty(pgid, grace):
            return
        # Children still there after their leader left (a JVM slow to shut down).
        _signal_group(pgid, signal.SIGKILL)
        if not _wait_group_empty(pgid, grace):
            left = ", ".join(map(str, group_members(pgid)))
            raise RuntimeError(f"{self.name}: processes {left} survived SIGKILL")

    def output_tail(self, lines: int = _TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _start_error(self, what: str) -> ServerStartError:
        tail = self.output_tail()
        command = " ".join(self.command)
        # Stop what did start, so a failed start leaves nothing running either.
        self.stop(grace=2.0)
        return ServerStartError(
            f"{self.name} {what}.\ncommand: {command}\n"
            f"last output ({self.log_path}):\n{tail or '(none)'}"
        )


def _signal_group(pgid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signum)


def _wait_group_empty(pgid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while group_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(_POLL_SECONDS)
    return True


def answers_http(host: str, port: int, path: str = "/") -> bool:
    """True once something on ``host:port`` gives any HTTP response to a GET."""
    connection = http.client.HTTPConnection(host, port, timeout=2)
    try:
        connection.request("GET", path)
        connection.getresponse().read()
    except OSError:
        return False
    finally:
        connection.close()
    return True


class FunctionServer(Service):
    """A Cloud Function served by the real functions-framework on 127.0.0.1.

    ``env`` is added to this process's environment for the function. The framework's
    own server settings are kept: one gunicorn worker with several threads, so unlike a
    function deployed with ``--concurrency=1`` it may run two requests at once. (One
    thread cannot be had: gunicorn then uses its sync worker, which blocks on the idle
    connections the Pub/Sub emulator opens ahead and so paces pushes 2 s apart.) A push
    subscription with message ordering still delivers one ordering key's messages one
    at a time, each after the previous one was acknowledged.
    """

    def __init__(
        self,
        source: str | os.PathLike[str],
        target: str,
        env: Mapping[str, str] | None = None,
        *,
        signature_type: str = "cloudevent",
        startup_timeout: float = 60.0,
    ) -> None:
        self.source = Path(source).resolve()
        self.target = target
        self.signature_type = signature_type
        self.startup_timeout = startup_timeout
        self._env = dict(env or {})
        self._port: int | None = None
        self._workdir: tempfile.TemporaryDirectory[str] | None = None
        self._server: ServerProcess | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the function server is not running")
        return self._port

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The framework's pid, which is also its process group id."""
        return self._server.pid if self._server else None

    def push_endpoint(self, topic: str) -> str:
        """Where a push subscription on ``topic`` (projects/P/topics/T) should deliver.

        functions-framework reads the topic from the request path of a raw push and puts
        it in the CloudEvent's source, as ``//pubsub.googleapis.com/projects/P/topics/T``,
        which is the source Eventarc gives the same event.
        """
        return f"{self.url}/{topic.strip('/')}"

    def command(self, port: int) -> list[str]:
        # The framework's CLI, run by this interpreter, so the function sees the same
        # installed packages (dynagent among them) as the tests.
        return [
            sys.executable, "-m", "functions_framework",
            "--target", self.target,
            "--source", str(self.source),
            "--signature-type", self.signature_type,
            "--host", LOOPBACK,
            "--port", str(port),
        ]  # fmt: skip

    def start(self) -> Self:
        if self._server is not None:
            return self
        if not self.source.is_file():
            raise FileNotFoundError(f"function source {self.source} does not exist")
        self._workdir = tempfile.TemporaryDirectory(prefix="dynagent-function-")
        workdir = Path(self._workdir.name)
        port = free_port()
        server = ServerProcess(
            f"functions-framework ({self.target})",
            self.command(port),
            env={**os.environ, **self._env},
            # Cloud Functions runs in the source's directory: a relative
            # DYNAGENT_CONFIG=dynagent.yaml resolves there.
            cwd=self.source.parent,
            log_path=workdir / "server.log",
            # gunicorn's quick shutdown: SIGTERM would wait out the keep-alive
            # connections the emulator holds open, about 2 s per stop.
            stop_signal=signal.SIGINT,
        )
        server.start()
        self._server, self._port = server, port
        try:
            server.wait_until(lambda: answers_http(LOOPBACK, port), self.startup_timeout)
        except BaseException:
            # Ctrl-C while waiting included: nothing may outlive a failed start.
            self._server = None
            server.stop(grace=2.0)
            self._cleanup()
            raise
        return self

    def output(self) -> str:
        """Everything the function and the framework printed so far (for test failures)."""
        return self._server.output_tail(lines=10_000) if self._server else ""

    def stop(self) -> None:
        server, self._server = self._server, None
        try:
            if server is not None:
                server.stop()
        finally:
            self._cleanup()

    def _cleanup(self) -> None:
        self._port = None
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None
