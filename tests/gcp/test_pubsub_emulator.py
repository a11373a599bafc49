"""The Pub/Sub emulator harness and the path a snapshot takes on GCP, run for real locally.

publish (ordering key) → Pub/Sub emulator → push subscription → functions-framework →
a cloudevent function. The function here is ``echo_function.py``, which writes down
what it receives; the real ``reconcile`` plugs into the same harness.

Everything listens on 127.0.0.1; one emulator serves the session (``emulators.py``),
and each test stops the function servers it starts.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dynagent.testing.gcp import pubsub
from dynagent.testing.gcp.functions_server import FunctionServer, ServerStartError, group_members
from dynagent.testing.gcp.pubsub import PubSubEmulator

from . import emulators

ROOT = Path(__file__).resolve().parents[2]
ECHO_SOURCE = Path(__file__).with_name("echo_function.py")
MESSAGE_PUBLISHED = "google.cloud.pubsub.topic.v1.messagePublished"
DELIVERY_TIMEOUT = 30.0


@pytest.fixture
def echo(tmp_path: Path) -> Iterator[tuple[FunctionServer, Path]]:
    """The echo function under functions-framework, and the file it records to."""
    record = tmp_path / "received.jsonl"
    with FunctionServer(ECHO_SOURCE, "echo", {"ECHO_RECORD_FILE": str(record)}) as server:
        yield server, record


def received(record: Path, count: int, server: FunctionServer) -> list[dict[str, Any]]:
    """Wait (bounded) until the function has recorded ``count`` messages."""
    deadline = time.monotonic() + DELIVERY_TIMEOUT
    while time.monotonic() < deadline:
        lines = record.read_text().splitlines() if record.exists() else []
        if len(lines) >= count:
            return [json.loads(line) for line in lines]
        time.sleep(0.05)
    pytest.fail(f"{count} message(s) not delivered in {DELIVERY_TIMEOUT:g}s\n{server.output()}")


# --------------------------------------------------------------------------------------
# Skip or fail: DYNAGENT_REQUIRE_EMULATORS (no emulator needed)
# --------------------------------------------------------------------------------------


def test_require_returns_when_the_emulator_is_available() -> None:
    emulators.require((True, "here"), env={emulators.REQUIRE_ENV: "1"})


def test_require_skips_with_the_reason_when_not_required() -> None:
    with pytest.raises(pytest.skip.Exception, match="java is not on PATH"):
        emulators.require((False, "java is not on PATH"), env={})


def test_require_fails_with_the_reason_when_required() -> None:
    with pytest.raises(pytest.fail.Exception) as failure:
        emulators.require((False, "java is not on PATH"), env={emulators.REQUIRE_ENV: "1"})
    assert "java is not on PATH" in str(failure.value)
    assert "DYNAGENT_REQUIRE_EMULATORS=1" in str(failure.value)


def test_only_the_value_1_requires_emulators() -> None:
    assert emulators.emulators_required({emulators.REQUIRE_ENV: "1"})
    assert not emulators.emulators_required({emulators.REQUIRE_ENV: "0"})
    assert not emulators.emulators_required({})


def _executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


def test_available_names_what_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "sdk" / "bin"
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("CLOUDSDK_ROOT_DIR", raising=False)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    ok, reason = pubsub.available()
    assert not ok and "gcloud is not on PATH" in reason

    _executable(bin_dir / "gcloud")
    ok, reason = pubsub.available()
    assert not ok and "pubsub-emulator" in reason

    _executable(tmp_path / "sdk" / pubsub.LAUNCHER)
    ok, reason = pubsub.available()
    assert not ok and "java is not on PATH" in reason

    _executable(bin_dir / "java")
    assert pubsub.available() == (True, f"Pub/Sub emulator at {tmp_path / 'sdk' / pubsub.LAUNCHER}")


# --------------------------------------------------------------------------------------
# The emulator and its clients
# --------------------------------------------------------------------------------------


def test_clients_publish_and_pull_without_touching_the_environment(
    pubsub_emulator: PubSubEmulator, publisher: Any, subscriber: Any, names: Any
) -> None:
    topic = pubsub_emulator.topic_path(names("snapshots"))
    subscription = pubsub_emulator.subscription_path(names("pull"))
    publisher.create_topic(name=topic)
    subscriber.create_subscription(
        request={"name": subscription, "topic": topic, "enable_message_ordering": True}
    )

    publisher.publish(topic, b'{"seq": 1}', ordering_key="a100", origin="test").result(timeout=10)
    response = subscriber.pull(subscription=subscription, max_messages=10, timeout=10)

    [message] = [item.message for item in response.received_messages]
    assert message.data == b'{"seq": 1}'
    assert message.ordering_key == "a100"
    assert dict(message.attributes) == {"origin": "test"}
    assert pubsub.EMULATOR_HOST_ENV not in os.environ
    assert pubsub_emulator.env() == {
        "PUBSUB_EMULATOR_HOST": pubsub_emulator.host,
        "PUBSUB_PROJECT_ID": pubsub_emulator.project,
    }
    assert pubsub_emulator.host.startswith("127.0.0.1:")


def test_env_points_a_subprocess_at_the_emulator(
    pubsub_emulator: PubSubEmulator, publisher: Any, subscriber: Any, names: Any
) -> None:
    """What a function under functions-framework gets: the documented variables only."""
    topic = pubsub_emulator.topic_path(names("from-child"))
    subscription = pubsub_emulator.subscription_path(names("pull"))
    publisher.create_topic(name=topic)
    subscriber.create_subscription(request={"name": subscription, "topic": topic})
    child = (
        "import sys\n"
        "from google.cloud import pubsub_v1\n"
        "client = pubsub_v1.PublisherClient()\n"
        "client.publish(sys.argv[1], b'from a child').result(timeout=10)\n"
    )
    env = {**os.environ, **pubsub_emulator.env()}
    subprocess.run([sys.executable, "-c", child, topic], env=env, check=True, timeout=60)

    response = subscriber.pull(subscription=subscription, max_messages=1, timeout=10)
    assert [item.message.data for item in response.received_messages] == [b"from a child"]


def test_stop_ends_the_emulator_and_its_java(tmp_path: Path) -> None:
    """Through gcloud the JVM is a child of the launcher: stopping must end it too."""
    emulators.require_pubsub_emulator()
    emulator = PubSubEmulator(via_gcloud=True).start()
    pgid, port = emulator.pid, emulator.port
    assert pgid is not None
    assert _java_serving(port), "the emulator's JVM should be running"

    emulator.stop()

    assert group_members(pgid) == []
    assert not _java_serving(port)
    assert not emulator.running


def test_a_start_that_times_out_reports_the_output_and_leaves_nothing_running() -> None:
    emulators.require_pubsub_emulator()
    emulator = PubSubEmulator(startup_timeout=0.01)
    with pytest.raises(ServerStartError, match=r"did not answer within 0.01s") as failure:
        emulator.start()
    message = str(failure.value)
    assert "cloud-pubsub-emulator" in message and "last output" in message
    port = re.search(r"--port=(\d+)", message)
    assert port, message  # the command, for the reader
    assert not emulator.running
    assert not _java_serving(int(port.group(1)))


def _command_lines() -> list[str]:
    lines = []
    for entry in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            lines.append(entry.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue
    return lines


def _java_serving(port: int) -> bool:
    return any("java" in cmd and f"--port={port}" in cmd for cmd in _command_lines())


# --------------------------------------------------------------------------------------
# The function server
# --------------------------------------------------------------------------------------


def test_function_server_stops_its_whole_process_group(tmp_path: Path) -> None:
    server = FunctionServer(ECHO_SOURCE, "echo", {"ECHO_RECORD_FILE": str(tmp_path / "r")})
    with server:
        assert server.url.startswith("http://127.0.0.1:")
        pgid = server.pid
        assert pgid is not None and len(group_members(pgid)) >= 2  # gunicorn and its worker
    assert group_members(pgid) == []


def test_function_server_reports_a_missing_target() -> None:
    with pytest.raises(ServerStartError, match="exited with code") as failure:
        FunctionServer(ECHO_SOURCE, "no_such_function").start()
    assert "no_such_function" in str(failure.value)  # functions-framework's own message


# --------------------------------------------------------------------------------------
# End to end: publish → emulator → push → functions-framework → the function
# --------------------------------------------------------------------------------------


@pytest.fixture
def echo_topic(
    pubsub_emulator: PubSubEmulator,
    publisher: Any,
    subscriber: Any,
    echo: tuple[FunctionServer, Path],
    names: Any,
) -> str:
    """A new topic whose messages are pushed, in order, to the echo function."""
    server, _ = echo
    topic = pubsub_emulator.topic_path(names("snapshots"))
    publisher.create_topic(name=topic)
    emulators.push_subscription(
        pubsub_emulator, subscriber, topic, server.push_endpoint(topic), names("p")
    )
    return topic


def test_a_published_message_reaches_the_function_as_a_cloud_event(
    publisher: Any, echo: tuple[FunctionServer, Path], echo_topic: str
) -> None:
    server, record = echo
    topic = echo_topic

    body = json.dumps({"type": "pool.snapshot", "pool": "a100", "seq": 7})
    message_id = publisher.publish(
        topic, body.encode(), ordering_key="a100", **{"dynagent-dedup-id": "a100:7"}
    ).result(timeout=10)

    [event] = received(record, 1, server)
    assert event["type"] == MESSAGE_PUBLISHED
    # The source Eventarc gives the same event: the topic, read from the push URL.
    assert event["source"] == f"//pubsub.googleapis.com/{topic}"
    assert event["message_id"] == event["id"] == message_id
    assert event["data"] == body  # cloud_event.data["message"]["data"], base64-decoded
    assert event["attributes"] == {"dynagent-dedup-id": "a100:7"}
    # functions-framework's push conversion keeps data, attributes, messageId and
    # publishTime, but not orderingKey: the pool must come from the body, not the key.
    assert event["ordering_key"] is None


def test_one_ordering_key_is_delivered_in_order_one_at_a_time(
    publisher: Any, echo: tuple[FunctionServer, Path], echo_topic: str
) -> None:
    server, record = echo
    topic = echo_topic

    publisher.publish(topic, b"a100:1", ordering_key="a100", sleep="0.5")
    publisher.publish(topic, b"a100:2", ordering_key="a100")
    publisher.publish(topic, b"a100:3", ordering_key="a100").result(timeout=10)

    events = received(record, 3, server)
    assert [event["data"] for event in events] == ["a100:1", "a100:2", "a100:3"]
    # Each one is pushed only after the one before it was acknowledged.
    for before, after in itertools.pairwise(events):
        assert after["received_at"] >= before["finished_at"]


def test_a_failed_delivery_is_pushed_again_and_holds_back_its_key(
    publisher: Any, echo: tuple[FunctionServer, Path], echo_topic: str
) -> None:
    server, record = echo
    topic = echo_topic

    publisher.publish(topic, b"flaky", ordering_key="a100", fail="once")
    publisher.publish(topic, b"after", ordering_key="a100").result(timeout=10)

    events = received(record, 2, server)
    assert [event["data"] for event in events] == ["flaky", "after"]
    assert "failing the first delivery on purpose" in server.output()


def test_the_real_reconcile_sets_an_invalid_snapshot_aside_on_the_dead_letter_topic(
    pubsub_emulator: PubSubEmulator, publisher: Any, subscriber: Any, names: Any
) -> None:
    """functions/gcp/main.py under the same harness: a message it can never apply goes to
    the dead-letter topic at once, with the reason (no Compute Engine call is made)."""
    snapshots = pubsub_emulator.topic_path(names("snapshots"))
    dead_letters = pubsub_emulator.topic_path(names("dead-letters"))
    kept = pubsub_emulator.subscription_path(names("kept"))
    publisher.create_topic(name=snapshots)
    publisher.create_topic(name=dead_letters)
    subscriber.create_subscription(request={"name": kept, "topic": dead_letters})
    env = {
        **pubsub_emulator.env(),
        "DYNAGENT_CONFIG": str(ROOT / "infra" / "gcp" / "dynagent.example.yaml"),
        "DYNAGENT_DEAD_LETTER_TOPIC": dead_letters,
    }
    with FunctionServer(ROOT / "functions" / "gcp" / "main.py", "reconcile", env) as server:
        endpoint = server.push_endpoint(snapshots)
        emulators.push_subscription(pubsub_emulator, subscriber, snapshots, endpoint, names("p"))
        body = b'{"type": "pool.snapshot", "version": 99, "pool": "t4"}'
        publisher.publish(snapshots, body, ordering_key="t4").result(timeout=10)

        deadline = time.monotonic() + DELIVERY_TIMEOUT
        messages: list[Any] = []
        while not messages and time.monotonic() < deadline:
            response = subscriber.pull(subscription=kept, max_messages=1, timeout=10)
            messages = [item.message for item in response.received_messages]
        assert messages, server.output()

    [message] = messages
    assert message.data == body
    assert "version 99" in message.attributes["dynagent-reason"]
