"""The real Pub/Sub emulator on loopback, for tests and local runs of the GCP functions.

``PubSubEmulator`` starts the emulator that ships with the gcloud SDK (the
``pubsub-emulator`` component, a Java server) as a subprocess on 127.0.0.1 and a free
port, waits until it answers, and stops its whole process group. Its clients are real
``google-cloud-pubsub`` clients on an insecure gRPC channel to it: nothing here reads or
sets ``PUBSUB_EMULATOR_HOST`` in this process; ``env()`` gives the variables to hand to a
subprocess (a function under functions-framework) that should use the emulator.

It runs the component's own launcher script rather than ``gcloud beta emulators pubsub
start``: that command only starts the same script after loading gcloud itself, about
half a second more per start here, and writes an ``env.yaml`` we do not need. Both are
supported (``via_gcloud=True``), and both get a scratch directory of their own.

``available()`` says whether this machine can run it (gcloud, the component, Java), so
tests can skip with the reason where it cannot.
"""

from __future__ import annotations

import functools
import http.client
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Final, Self

from dynagent.testing.gcp.functions_server import ServerProcess, free_port
from dynagent.testing.loopback import LOOPBACK, Service

DEFAULT_PROJECT: Final = "dynagent-local"
EMULATOR_HOST_ENV: Final = "PUBSUB_EMULATOR_HOST"
PROJECT_ENV: Final = "PUBSUB_PROJECT_ID"
# Where the component keeps its launcher, under the SDK root.
LAUNCHER: Final = Path("platform", "pubsub-emulator", "bin", "cloud-pubsub-emulator")
# A cold JVM start takes 1-2 s here; CI machines can be much slower.
DEFAULT_STARTUP_TIMEOUT: Final = 90.0


def sdk_root() -> Path | None:
    """The gcloud SDK root: $CLOUDSDK_ROOT_DIR, else two levels above the real gcloud."""
    configured = os.environ.get("CLOUDSDK_ROOT_DIR")
    if configured:
        return Path(configured)
    gcloud = shutil.which("gcloud")
    if gcloud is None:
        return None
    # /usr/bin/gcloud is a link to SDK_ROOT/bin/gcloud in the Debian and tarball installs.
    return Path(gcloud).resolve().parent.parent


def java_command() -> str | None:
    """The java the launcher will use: $JAVA_HOME/bin/java first, as the script does."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.access(Path(java_home, "bin", "java"), os.X_OK):
        return str(Path(java_home, "bin", "java"))
    return shutil.which("java")


def available() -> tuple[bool, str]:
    """Whether the emulator can run here, and if not, what is missing and how to get it."""
    if shutil.which("gcloud") is None:
        return False, "gcloud is not on PATH (install the Google Cloud SDK)"
    root = sdk_root()
    if root is None or not (root / LAUNCHER).is_file():
        return False, (
            f"the Pub/Sub emulator is not installed under {root} (gcloud components "
            "install pubsub-emulator, or the google-cloud-cli-pubsub-emulator package)"
        )
    if java_command() is None:
        return False, "java is not on PATH (the Pub/Sub emulator needs a JRE 11+)"
    return True, f"Pub/Sub emulator at {root / LAUNCHER}"


def emulator_command(port: int, data_dir: Path, *, via_gcloud: bool = False) -> list[str]:
    host_port = f"{LOOPBACK}:{port}"
    if via_gcloud:
        return [
            "gcloud", "beta", "emulators", "pubsub", "start",
            f"--host-port={host_port}", f"--data-dir={data_dir}", "--quiet",
        ]  # fmt: skip
    root = sdk_root()
    if root is None:
        raise FileNotFoundError("gcloud is not on PATH")
    return [str(root / LAUNCHER), f"--host={LOOPBACK}", f"--port={port}"]


class PubSubEmulator(Service):
    """The Pub/Sub emulator on 127.0.0.1, as a context manager or with start()/stop().

    One emulator holds any number of projects; ``project`` is the one ``env()`` names and
    the path helpers use. Clients made by ``publisher()``/``subscriber()`` are closed by
    ``stop()``.
    """

    def __init__(
        self,
        project: str = DEFAULT_PROJECT,
        *,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        via_gcloud: bool = False,
    ) -> None:
        self.project = project
        self.startup_timeout = startup_timeout
        self.via_gcloud = via_gcloud
        self.startup_seconds: float | None = None  # how long the last start() took
        self._port: int | None = None
        self._workdir: tempfile.TemporaryDirectory[str] | None = None
        self._server: ServerProcess | None = None
        self._clients: list[Any] = []

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> Self:
        if self._server is not None:
            return self
        ok, reason = available()
        if not ok:
            raise RuntimeError(f"cannot start the Pub/Sub emulator: {reason}")
        began = time.monotonic()
        self._workdir = tempfile.TemporaryDirectory(prefix="dynagent-pubsub-")
        workdir = Path(self._workdir.name)
        (workdir / "data").mkdir()
        port = free_port()
        server = ServerProcess(
            "Pub/Sub emulator",
            emulator_command(port, workdir / "data", via_gcloud=self.via_gcloud),
            env=_child_env(),
            cwd=workdir,
            log_path=workdir / "emulator.log",
        )
        server.start()
        self._server, self._port = server, port
        try:
            server.wait_until(self._answers, self.startup_timeout)
        except BaseException:
            # Ctrl-C while waiting included: nothing may outlive a failed start.
            self._server = None
            server.stop(grace=2.0)
            self._cleanup()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def stop(self) -> None:
        """Close our clients, then end the emulator's process group (and its JVM)."""
        clients, self._clients = self._clients, []
        server, self._server = self._server, None
        try:
            for close in clients:
                close()
        finally:
            try:
                if server is not None:
                    server.stop()
            finally:
                self._cleanup()

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def pid(self) -> int | None:
        """The launcher's pid, which is also its process group id."""
        return self._server.pid if self._server else None

    def output(self) -> str:
        return self._server.output_tail(lines=10_000) if self._server else ""

    # -- where it is ---------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the Pub/Sub emulator is not running")
        return self._port

    @property
    def host(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def env(self) -> dict[str, str]:
        """Variables that point a subprocess's Pub/Sub clients at this emulator."""
        return {EMULATOR_HOST_ENV: self.host, PROJECT_ENV: self.project}

    def topic_path(self, topic: str) -> str:
        return f"projects/{self.project}/topics/{topic}"

    def subscription_path(self, subscription: str) -> str:
        return f"projects/{self.project}/subscriptions/{subscription}"

    # -- clients -------------------------------------------------------------------------

    def publisher(self, **options: Any) -> Any:
        """A ``pubsub_v1.PublisherClient`` on this emulator; ``options`` go to the client
        (``publisher_options=PublisherOptions(enable_message_ordering=True)``, ...)."""
        from google.cloud import pubsub_v1  # type: ignore[attr-defined]
        from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport

        transport = PublisherGrpcTransport(channel=self._channel(), host=self.host)
        client = pubsub_v1.PublisherClient(transport=transport, **options)
        self._clients.append(functools.partial(_close_publisher, client))
        return client

    def subscriber(self, **options: Any) -> Any:
        """A ``pubsub_v1.SubscriberClient`` on this emulator."""
        from google.cloud import pubsub_v1  # type: ignore[attr-defined]
        from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport

        transport = SubscriberGrpcTransport(channel=self._channel(), host=self.host)
        client = pubsub_v1.SubscriberClient(transport=transport, **options)
        self._clients.append(client.close)
        return client

    def _channel(self) -> Any:
        # A transport given a ready channel uses it as is and asks for no credentials:
        # the emulator speaks plaintext gRPC and checks none.
        import grpc  # type: ignore[import-untyped]

        # Loopback only: never through a proxy named in the environment. No message size
        # cap, as the clients' own channels have: gRPC's default 4 MB would refuse what
        # Pub/Sub takes (10 MB messages).
        options = [
            ("grpc.enable_http_proxy", 0),
            ("grpc.max_send_message_length", -1),
            ("grpc.max_receive_message_length", -1),
        ]
        return grpc.insecure_channel(self.host, options=options)

    # -- internals -----------------------------------------------------------------------

    def _answers(self) -> bool:
        # The emulator serves a REST surface on the gRPC port; a topic list means it is up.
        # http.client, not urllib: a loopback probe must never go through an HTTP proxy.
        connection = http.client.HTTPConnection(LOOPBACK, self.port, timeout=2)
        try:
            connection.request("GET", f"/v1/projects/{self.project}/topics")
            response = connection.getresponse()
            json.loads(response.read())
        except (OSError, ValueError):
            return False
        finally:
            connection.close()
        return response.status == 200

    def _cleanup(self) -> None:
        self._port = None
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None


def _child_env() -> dict[str, str]:
    """This environment, less anything that would point the emulator's gcloud elsewhere."""
    env = dict(os.environ)
    env.pop(EMULATOR_HOST_ENV, None)
    # gcloud must not prompt (there is no terminal) or phone home.
    env.update({"CLOUDSDK_CORE_DISABLE_PROMPTS": "1", "CLOUDSDK_CORE_DISABLE_USAGE_REPORTING": "1"})
    return env


def _close_publisher(client: Any) -> None:
    # stop() sends what is batched and refuses new messages; then free the channel.
    client.stop()
    client.transport.close()
