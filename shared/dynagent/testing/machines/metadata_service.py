"""The instance metadata service of one machine: EC2's IMDSv2 or GCE's metadata server.

An ``AgentMachine`` serves it at 169.254.169.254:80 inside its own network namespace,
where a boot script finds it as on a cloud VM (Determined's boot takes the agent id from
it: EC2 ``meta-data/instance-id`` after a token ``PUT``, GCE ``instance/name`` with
``Metadata-Flavor: Google``). Simpler than the real ones: a fixed set of keys, tokens
that never expire, no hop limit, and every call recorded for the tests.

* EC2 (IMDSv2 required, as Determined launches its instances): ``PUT /latest/api/token``
  with ``X-aws-ec2-metadata-token-ttl-seconds`` (1 to 21600) gives a token; every
  ``GET /latest/meta-data/...`` needs it in ``X-aws-ec2-metadata-token``, else 401.
  A ``PUT`` carrying ``X-Forwarded-For`` is refused (403), as EC2 refuses proxied ones.
* GCE: ``GET /computeMetadata/v1/...`` needs ``Metadata-Flavor: Google``, else 403;
  a request with ``X-Forwarded-For`` is refused (403) too.
"""

from __future__ import annotations

import hashlib
import secrets
import socket
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final, Literal, NamedTuple

Cloud = Literal["aws", "gcp"]
ADDRESS: Final = "169.254.169.254"
PORT: Final = 80
MAX_TOKEN_TTL: Final = 21600


class MetadataCall(NamedTuple):
    """One request: method, path, and the answer's HTTP status."""

    method: str
    path: str
    status: int


def aws_metadata(instance_id: str, zone: str, private_ip: str = "10.0.0.10") -> dict[str, str]:
    """The keys under ``/latest/meta-data/`` for one EC2 instance."""
    hostname = f"ip-{private_ip.replace('.', '-')}.{zone[:-1]}.compute.internal"
    return {
        "instance-id": instance_id,
        "local-ipv4": private_ip,
        "hostname": hostname,
        "local-hostname": hostname,
        "placement/availability-zone": zone,
        "placement/region": zone[:-1],
        "instance-type": "p4d.24xlarge",
        "ami-id": "ami-0123456789abcdef0",
    }


def gcp_metadata(name: str, zone: str, project: str = "dynagent-test") -> dict[str, str]:
    """The keys under ``/computeMetadata/v1/`` for one GCE instance."""
    return {
        "instance/name": name,
        "instance/id": str(int(hashlib.sha256(name.encode()).hexdigest()[:15], 16)),
        "instance/zone": f"projects/123456789012/zones/{zone}",
        "instance/hostname": f"{name}.{zone}.c.{project}.internal",
        "instance/machine-type": "projects/123456789012/machineTypes/a2-highgpu-8g",
        "project/project-id": project,
        "project/numeric-project-id": "123456789012",
    }


class MetadataService:
    """Serves one cloud's metadata on an already-listening socket, from a thread."""

    def __init__(self, cloud: Cloud, values: Mapping[str, str], listener: socket.socket) -> None:
        self.cloud: Cloud = cloud
        self._values = dict(values)
        self._tokens: set[str] = set()
        self._lock = threading.Lock()
        self._calls: list[MetadataCall] = []
        self._server = _Server(listener, _Handler, self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"metadata:{cloud}",
            daemon=True,
        )
        self._thread.start()

    def calls(self) -> list[MetadataCall]:
        with self._lock:
            return list(self._calls)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def answer(self, method: str, path: str, headers: Mapping[str, str]) -> tuple[int, str]:
        """(status, body) for one request; recorded."""
        status, body = self._answer(method, path.split("?", 1)[0], headers)
        with self._lock:
            self._calls.append(MetadataCall(method, path, status))
        return status, body

    def _answer(self, method: str, path: str, headers: Mapping[str, str]) -> tuple[int, str]:
        if "x-forwarded-for" in headers:
            return 403, "Forbidden\n"
        if self.cloud == "aws":
            return self._aws(method, path, headers)
        return self._gcp(method, path, headers)

    def _aws(self, method: str, path: str, headers: Mapping[str, str]) -> tuple[int, str]:
        if path == "/latest/api/token":
            if method != "PUT":
                return 405, "Method Not Allowed\n"
            ttl = headers.get("x-aws-ec2-metadata-token-ttl-seconds", "")
            if not ttl.isdigit() or not 1 <= int(ttl) <= MAX_TOKEN_TTL:
                return 400, "Bad Request\n"
            token = secrets.token_urlsafe(32)
            with self._lock:
                self._tokens.add(token)
            return 200, token
        if not path.startswith("/latest/meta-data/"):
            return 404, "Not Found\n"
        with self._lock:
            known = headers.get("x-aws-ec2-metadata-token", "") in self._tokens
        if not known:
            return 401, "Unauthorized\n"
        return self._lookup(path.removeprefix("/latest/meta-data/"))

    def _gcp(self, method: str, path: str, headers: Mapping[str, str]) -> tuple[int, str]:
        if not path.startswith("/computeMetadata/v1/"):
            return 404, "Not Found\n"
        if headers.get("metadata-flavor") != "Google":
            return 403, "Missing Metadata-Flavor:Google header.\n"
        if method != "GET":
            return 405, "Method Not Allowed\n"
        return self._lookup(path.removeprefix("/computeMetadata/v1/"))

    def _lookup(self, key: str) -> tuple[int, str]:
        value = self._values.get(key)
        return (404, "Not Found\n") if value is None else (200, value)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self, listener: socket.socket, handler: type[BaseHTTPRequestHandler], owner: Any
    ) -> None:
        super().__init__(listener.getsockname()[:2], handler, bind_and_activate=False)
        self.socket.close()
        self.socket = listener  # bound and listening in the machine's namespace already
        self.owner: MetadataService = owner


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.0"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # recorded in MetadataService.calls() instead

    def do_GET(self) -> None:
        self._respond()

    def do_PUT(self) -> None:
        self._respond()

    def do_POST(self) -> None:
        self._respond()

    def _respond(self) -> None:
        headers = {key.lower(): value for key, value in self.headers.items()}
        length = int(headers.get("content-length", "0") or "0")
        if length:
            self.rfile.read(length)
        status, body = self.server.owner.answer(self.command, self.path, headers)
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        if self.server.owner.cloud == "gcp":
            self.send_header("Metadata-Flavor", "Google")
        self.end_headers()
        self.wfile.write(data)
