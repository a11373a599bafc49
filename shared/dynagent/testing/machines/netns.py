"""Listening sockets inside another network namespace, served from this process.

A Linux network namespace belongs to a thread, not to a process: a thread that calls
``setns(2)`` on ``/proc/<pid>/ns/net`` opens its sockets in that namespace, and a socket
stays in the namespace it was opened in for its whole life. So a test can bind a port
inside a namespace it made (an ``AgentMachine``, or a container in one) from a short-lived
helper thread and then serve it from ordinary threads in the host namespace, with no
process to start inside. The listening socket holds a reference to its namespace: close
it when that namespace's owner goes, or the namespace lives on.

``Forwarder`` relays each connection accepted on such a socket to an address on the host
side (a loopback port), which is how a machine reaches the test's master.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import threading
from collections.abc import Callable
from typing import Final, TypeVar

CLONE_NEWNET: Final = 0x40000000
_ACCEPT_POLL_SECONDS: Final = 0.1
_CHUNK: Final = 65536

T = TypeVar("T")


def netns_path(pid: int) -> str:
    """The network namespace of process ``pid``, as a path ``setns`` takes."""
    return f"/proc/{pid}/ns/net"


def netns_id(pid: int) -> int:
    """An id of the process's network namespace (its inode): equal ids, same namespace."""
    return os.stat(netns_path(pid)).st_ino


def in_netns(path: str, action: Callable[[], T]) -> T:
    """``action()`` run on a new thread that first joined the network namespace at
    ``path``; its result, or its exception raised here. The calling thread never moves."""
    outcome: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            _setns(path)
            outcome.append(action())
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=run, name=f"netns:{path}", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]


def _setns(path: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns({path}): {os.strerror(errno)}")
    finally:
        os.close(fd)


def listen_in(path: str, host: str, port: int, backlog: int = 64) -> socket.socket:
    """A TCP socket listening on ``host:port`` inside the network namespace at ``path``."""

    def listen() -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(backlog)
        except BaseException:
            sock.close()
            raise
        return sock

    return in_netns(path, listen)


class Forwarder:
    """Relays every connection accepted on ``listener`` to ``target`` (host, port), both
    ways, until closed; ``close()`` closes the listener and every open relay."""

    def __init__(self, listener: socket.socket, target: tuple[str, int], name: str) -> None:
        self._listener = listener
        self._target = target
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        listener.settimeout(_ACCEPT_POLL_SECONDS)
        self._thread = threading.Thread(target=self._accept, name=name, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stopped.set()
        self._thread.join()
        self._listener.close()
        with self._lock:
            for sock in self._open:
                _shut(sock)
            self._open.clear()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self._target, timeout=5)
        except OSError:
            client.close()  # the client sees the connection drop, as a refused route
            return
        upstream.settimeout(None)
        with self._lock:
            if self._stopped.is_set():
                client.close()
                upstream.close()
                return
            self._open.update((client, upstream))
        back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
        back.start()
        _pump(client, upstream)
        back.join()
        with self._lock:
            self._open.discard(client)
            self._open.discard(upstream)
        client.close()
        upstream.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy until ``source`` ends, then end ``sink``'s writing side."""
    try:
        while data := source.recv(_CHUNK):
            sink.sendall(data)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
