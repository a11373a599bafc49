"""What the local servers share: a WSGI app on 127.0.0.1 in a thread, and start/stop use.

Servers that tests start listen on loopback only, on a port the OS picks, and whoever
starts one stops it: ``close()`` shuts it down, closes the socket and joins the thread.
"""

from __future__ import annotations

import json
import ssl
import threading
from abc import ABC, abstractmethod
from types import TracebackType
from typing import Any, Final, Generic, Self, TypeVar

from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

LOOPBACK: Final = "127.0.0.1"
# serve_forever() checks for shutdown this often: it bounds how long close() takes.
_POLL_SECONDS: Final = 0.05


Call = TypeVar("Call")


class CallLog(Generic[Call]):
    """An ordered, thread-safe record of calls: a server handles requests on many threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: list[Call] = []

    def record(self, call: Call) -> None:
        with self._lock:
            self._calls.append(call)

    def snapshot(self) -> list[Call]:
        with self._lock:
            return list(self._calls)

    def clear(self) -> None:
        with self._lock:
            self._calls.clear()


class QuietHandler(WSGIRequestHandler):
    """werkzeug's handler without an access-log line per request on stderr: it would
    drown the demo's output, and the local servers record their calls themselves."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass


class LoopbackServer:
    """``app`` served on 127.0.0.1, an OS-chosen port, from a daemon thread.

    ``port`` binds a given port instead: a server that was closed to refuse connections
    for a while comes back where its clients expect it. ``ssl_context`` serves HTTPS.
    """

    def __init__(
        self,
        app: Any,
        name: str,
        handler: type[WSGIRequestHandler] = QuietHandler,
        port: int = 0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._server: BaseWSGIServer = make_server(
            LOOPBACK, port, app, threaded=True, request_handler=handler, ssl_context=ssl_context
        )
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": _POLL_SECONDS},
            name=f"{name}:{self.port}",
            daemon=True,  # never keep a test run alive; close() still joins it
        )
        self._thread.start()

    @property
    def address(self) -> tuple[str, int]:
        """The (host, port) the listening socket is bound to, as the OS reports it."""
        host, port = self._server.socket.getsockname()[:2]
        return str(host), int(port)

    @property
    def port(self) -> int:
        return self.address[1]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()  # shutdown() alone leaves the port bound
        self._thread.join()


class Service(ABC):
    """Something local to start and stop, usable as a context manager."""

    @abstractmethod
    def start(self) -> Self: ...

    @abstractmethod
    def stop(self) -> None: ...

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


class LoopbackApp(Service):
    """A WSGI double served on loopback, started and stopped whole: ``_app`` answers,
    ``server_name`` names its thread."""

    server_name: str

    def __init__(self) -> None:
        self._server: LoopbackServer | None = None

    @abstractmethod
    def _app(self, environ: Any, start_response: Any) -> Any: ...

    def start(self) -> Self:
        self._server = LoopbackServer(self._app, self.server_name)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    @property
    def endpoint(self) -> str:
        assert self._server is not None, "start() it first"
        return f"http://{LOOPBACK}:{self._server.port}"


class GoogleRefusal(Exception):
    """An error answer of a Google JSON API: its HTTP code, ``status`` and message."""

    def __init__(self, code: int, status: str, message: str) -> None:
        super().__init__(message)
        self.code, self.status, self.message = code, status, message

    def response(self) -> Any:
        from werkzeug.wrappers import Response

        body = {"error": {"code": self.code, "message": self.message, "status": self.status}}
        return Response(json.dumps(body), self.code, content_type="application/json")
