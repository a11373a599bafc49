"""The route from anywhere on a machine to the test's master, standing in for a VPC route.

In a cloud, an agent reaches its master at the master's private address from the VM and
from any container on it. Here the master (``LocalDetermined``) listens on the host's
127.0.0.1:PORT, and the machine has no route to the host at all, so the same
127.0.0.1:PORT is made to lead to it from every network namespace of the machine:

* the machine's own (what the boot script and ``--network host`` containers see);
* each container's own (``--network default`` or a user-defined network): the engine's
  event stream says when a container starts, ``docker inspect`` gives its process, and
  a ``Forwarder`` listens in that process's namespace. A restarted container (a new
  namespace) gets a new one; a container's forwarder closes when it dies.

Simpler than a VPC: the master is reached at loopback, not at a routable address, and
only its one port leads anywhere.
"""

from __future__ import annotations

import json
import subprocess
import threading
from typing import Final

from dynagent.testing.loopback import LOOPBACK
from dynagent.testing.machines.docker_engine import DOCKER, DockerEngine
from dynagent.testing.machines.netns import Forwarder, listen_in, netns_id, netns_path

_EVENTS: Final = ("start", "die")


class MasterRoutes:
    """Forwards ``127.0.0.1:port`` in the machine (holder ``pid``) and in each container."""

    def __init__(self, pid: int, port: int, engine: DockerEngine) -> None:
        self._port = port
        self._engine = engine
        self._lock = threading.Lock()
        self._machine_ns = netns_id(pid)
        self._machine = Forwarder(
            listen_in(netns_path(pid), LOOPBACK, port), (LOOPBACK, port), "route:machine"
        )
        self._containers: dict[int, tuple[str, Forwarder]] = {}  # netns id -> (container, fwd)
        self._events: subprocess.Popen[str] | None = None
        self._watcher: threading.Thread | None = None

    def watch(self) -> None:
        """Follow the engine's containers: call after the engine (re)starts."""
        self.unwatch()
        self._events = subprocess.Popen(
            [DOCKER, "events", "--format", "{{json .}}", "--filter", "type=container"]
            + [arg for event in _EVENTS for arg in ("--filter", f"event={event}")],
            env=self._engine.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._watcher = threading.Thread(
            target=self._follow, args=(self._events,), name="route:events", daemon=True
        )
        self._watcher.start()
        for container in self._engine.docker("ps", "-q", check=False).split():
            self._route(container)

    def unwatch(self) -> None:
        """Stop following, and close every container's forwarder."""
        events, self._events = self._events, None
        if events is not None:
            events.terminate()
            events.wait()
        if self._watcher is not None:
            self._watcher.join()
            self._watcher = None
        if events is not None and events.stdout is not None:
            events.stdout.close()
        with self._lock:
            forwarders = [forwarder for _, forwarder in self._containers.values()]
            self._containers.clear()
        for forwarder in forwarders:
            forwarder.close()

    def close(self) -> None:
        self.unwatch()
        self._machine.close()

    def routed(self) -> list[str]:
        """Ids of the containers that have a route now."""
        with self._lock:
            return [container for container, _ in self._containers.values()]

    def _follow(self, events: subprocess.Popen[str]) -> None:
        assert events.stdout is not None
        for line in events.stdout:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            container = str(event.get("id", ""))
            if event.get("Action", event.get("status")) == "start":
                self._route(container)
            else:
                self._unroute(container)

    def _route(self, container: str) -> None:
        info = self._engine.inspect(container)
        if info is None or not info["State"]["Running"]:
            return
        pid = int(info["State"]["Pid"])
        try:
            namespace = netns_id(pid)
            if namespace == self._machine_ns:
                return  # --network host: the machine's own route serves it
            with self._lock:
                if namespace in self._containers:
                    return
            listener = listen_in(netns_path(pid), LOOPBACK, self._port)
        except OSError:
            return  # it ended meanwhile
        forwarder = Forwarder(listener, (LOOPBACK, self._port), f"route:{container[:12]}")
        with self._lock:
            self._containers[namespace] = (info["Id"], forwarder)

    def _unroute(self, container: str) -> None:
        with self._lock:
            gone = [ns for ns, (cid, _) in self._containers.items() if cid == container]
            forwarders = [self._containers.pop(ns)[1] for ns in gone]
        for forwarder in forwarders:
            forwarder.close()
