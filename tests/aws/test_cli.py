"""The ``dynagent`` command, run in-process with the local AWS in its environment."""

from __future__ import annotations

import io
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from dynagent.aws import clients
from dynagent.cli.main import main

from .helpers import (
    fifo_queue,
    image_id,
    managed_instances,
    now,
    pool_document,
    snapshot,
    write_config,
)


@pytest.fixture
def env(aws: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in aws.env().items():
        monkeypatch.setenv(name, value)
    clients.ec2_client.cache_clear()
    clients.sqs_client.cache_clear()


def test_validate_summarises_a_good_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_config(tmp_path / "c.yaml", pool_document("ami-0123456789abcdef0", spot=True))
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "pool a100: aws p4d.24xlarge, 8 slots each, 0..5 instances" in out
    assert "spot" in out


def test_validate_explains_the_sizes_taken_from_the_pools_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    auto = {"warm_headroom_slots": "auto", "warm_pool": {"max_stopped": "auto"}}
    path = write_config(tmp_path / "c.yaml", pool_document("ami-0123456789abcdef0", **auto))
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "warm headroom (auto): keeps free room for the tasks that came" in out
    assert "within one start (90 s) before 90% of its arrivals" in out
    # p4d.24xlarge at $32.77: 270 s of it is $2.46, 112 hours of a $0.022 disk.
    assert "each kept until its disk has billed what a start of it saves" in out
    assert "(auto: p4d.24xlarge 112h8m" in out and "at most 168h" in out


def test_validate_names_the_pool_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_config(
        tmp_path / "c.yaml", pool_document("ami-0123456789abcdef0", max_idle_agent_period="soon")
    )
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "pool 'a100'" in err and "provider.max_idle_agent_period" in err


def test_validate_a_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(tmp_path / "nope.yaml")]) == 2
    assert "cannot read config" in capsys.readouterr().err


def test_publish_sets_group_and_dedup_ids(
    env: None, sqs: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = fifo_queue(sqs, "snapshots.fifo")
    monkeypatch.setattr("sys.stdin", io.StringIO(snapshot(42).to_json()))
    assert main(["publish", "--to", url]) == 0
    file = tmp_path / "s.json"
    file.write_text(snapshot(42).to_json())
    assert main(["publish", str(file), "--to", url]) == 0  # a resend: deduplicated

    messages = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"]
    )["Messages"]
    assert len(messages) == 1
    assert messages[0]["Attributes"]["MessageGroupId"] == "a100"
    assert messages[0]["Attributes"]["MessageDeduplicationId"] == "a100:42"


def test_publish_refuses_a_standard_queue(
    env: None, sqs: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = sqs.create_queue(QueueName="plain")["QueueUrl"]
    monkeypatch.setattr("sys.stdin", io.StringIO(snapshot(1).to_json()))
    assert main(["publish", "--to", url]) == 2
    assert "not a FIFO queue" in capsys.readouterr().err


def test_plan_changes_nothing(
    env: None, ec2: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_config(tmp_path / "c.yaml", pool_document(image_id(ec2)))
    file = tmp_path / "s.json"
    file.write_text(snapshot(3, pending=[("trial", 16)]).to_json())
    assert main(["plan", "--config", str(path), "--snapshot", str(file)]) == 0
    out = capsys.readouterr().out
    assert out.count("launch 1 p4d.24xlarge on-demand ($32.77/h): pending tasks: trial") == 2
    assert managed_instances(ec2) == []


def test_validate_says_slot_and_whose_prices_it_shows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    offerings = {"instance_types": ["g5.xlarge", "g5.12xlarge"], "prices": {"g5.12xlarge": 6.1}}
    # REGION (us-west-2) is not the region of the built-in list prices.
    document = pool_document("ami-0123456789abcdef0", instance_type="g5.xlarge")
    path = write_config(tmp_path / "c.yaml", {**document, "provider": {
        **document["provider"], "offerings": offerings}})  # fmt: skip
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "offers g5.xlarge (1 slot): on-demand $1.01/h" in out
    assert "g5.12xlarge (4 slots): on-demand $6.10/h" in out
    assert (
        "prices of g5.xlarge: dynagent's us-east-1 on-demand list prices, not us-west-2's; "
        "set offerings.prices to the pool's own"
    ) in out
    assert "1 slots" not in out


def test_plan_decides_on_the_snapshots_pool_of_several(
    env: None, ec2: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_config(
        tmp_path / "c.yaml", pool_document(image_id(ec2)), pool_document(image_id(ec2), "b")
    )
    file = tmp_path / "s.json"
    file.write_text(snapshot(3, pool="b", pending=[("trial", 8)]).to_json())
    assert main(["plan", "--config", str(path), "--snapshot", str(file)]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("pool b: 0 instances observed")
    assert captured.err == ""


@pytest.mark.parametrize(
    ("age", "pool", "warning"),
    [
        (
            timedelta(hours=2),
            "a100",
            # 2h, and a second or so: the clock went on.
            "the functions would skip {file}: snapshot is 2h",
        ),
        (
            -timedelta(hours=1),
            "a100",
            "the functions would refuse {file} as a dead letter: time: ",
        ),
        (
            timedelta(0),
            "other",
            "the functions would refuse {file} as a dead letter: pool 'other' is not configured",
        ),
        (
            timedelta(0),
            "b",
            "{file} is for pool 'b', not 'a100': the functions would apply it to 'b'",
        ),
    ],
)
def test_plan_warns_of_a_snapshot_the_functions_would_not_apply(
    env: None,
    ec2: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    age: timedelta,
    pool: str,
    warning: str,
) -> None:
    pools = pool_document(image_id(ec2)), pool_document(image_id(ec2), "b")
    path = write_config(tmp_path / "c.yaml", *pools)
    file = tmp_path / "s.json"
    file.write_text(snapshot(3, pool=pool, pending=[("trial", 8)], time=now() - age).to_json())
    argv = ["plan", "--config", str(path), "--pool", "a100", "--snapshot", str(file)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    warnings = captured.err.splitlines()
    assert warnings[0].startswith(f"dynagent: warning: {warning.format(file=file)}")
    assert warnings[1:] == ["dynagent: warning: the plan below decides on it all the same"]
    assert "launch 1 p4d.24xlarge" in captured.out

    assert main([*argv, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["warnings"][0].startswith(warning.format(file=file))


@pytest.mark.parametrize(
    "command", ["validate", "master-config", "plan", "status", "doctor", "bridge --print"]
)
def test_every_command_that_reads_the_config_takes_it_first_or_as_config(command: str) -> None:
    # Both forms parse alike: the file named first on the line, or after --config.
    from dynagent.cli.main import _parser
    from dynagent.files.config_argument import chosen_config

    first = _parser().parse_args([*command.split(), "pools.yaml"])
    flagged = _parser().parse_args([*command.split(), "--config", "pools.yaml"])
    assert chosen_config(first) == chosen_config(flagged) == "pools.yaml"
