"""``dynagent simulate`` on a tiny trace: the table, the JSON file and the plot."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from dynagent.cli.main import main
from dynagent.simulate.command import add_parser, run_options
from dynagent.simulate.run import RunOptions

TRACE = "arrival_s,duration_s,gpus\n0,3600,8\n60,1800,4\n7200,600,1\n"
POOL = """
resource_pools:
  - pool_name: small
    provider:
      type: aws
      region: us-east-1
      image_id: ami-0123456789abcdef0
      instance_type: p4d.24xlarge
      max_instances: 3
      max_idle_agent_period: 5m
"""


MIXED = """
resource_pools:
  - pool_name: mixed
    provider:
      type: aws
      region: us-east-1
      image_id: ami-0123456789abcdef0
      instance_type: p3.16xlarge
      offerings:
        instance_types: [p3.2xlarge, p3.8xlarge, p3.16xlarge]
        prices: {p3.16xlarge: 20.0}
        max_slots: 32
      max_instances: 8
      max_idle_agent_period: 5m
"""


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "trace.csv").write_text(TRACE)
    (tmp_path / "pool.yaml").write_text(POOL)
    return {name: tmp_path / name for name in ("trace.csv", "pool.yaml", "out.json", "out.html")}


def test_it_prints_the_table_and_writes_json_and_a_plot(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["simulate", str(files["trace.csv"]), "--config", str(files["pool.yaml"])]
    args += ["--json", str(files["out.json"]), "--plot", str(files["out.html"])]
    args += ["--boot-jitter", "0s", "--boot-per-gpu", "0s"]  # every boot 360 s
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "pool small: p4d.24xlarge, 8 GPUs each, 0..3 instances, idle 5m" in out
    assert "boot: running after 60s, agent registered after 360s; heartbeat 30s" in out
    for row in ("billed GPU-hours / limit", "wait p95", "launches", "tasks never scheduled"):
        assert row in out
    document = json.loads(files["out.json"].read_text())
    assert set(document["columns"]) == {"dynagent", "determined", "limit"}
    ours = document["columns"]["dynagent"]
    assert ours["wait_max"] == 360 and ours["never_scheduled"] == 0
    assert ours["cost"] == pytest.approx(ours["instance_hours"] * 32.7726, rel=1e-3)
    page = files["out.html"].read_text()
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") == 4
    assert "billed GPU-hours / limit" in page  # the table comes along


def test_no_config_means_the_default_8_gpu_pool(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["simulate", str(files["trace.csv"]), "--policy", "dynagent", "--price", "10"]
    args += ["--plot", str(files["out.html"]).replace(".html", ".svg")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "pool default: p4d.24xlarge, 8 GPUs each, 0..1000 instances" in out
    assert "determined" not in out.split("\n\n")[1]
    assert "price per instance-hour: p4d.24xlarge $10.00" in out


def test_a_sweep_runs_each_value(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["simulate", str(files["trace.csv"]), "--config", str(files["pool.yaml"])]
    args += ["--sweep", "max_idle_agent_period=1m,20m", "--json", str(files["out.json"])]
    args += ["--plot", str(files["out.html"])]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.count("dynagent") == 2 and out.count("determined") == 2
    points = json.loads(files["out.json"].read_text())["points"]
    assert [point["value"] for point in points] == ["1m", "20m"]
    short, long = (point["columns"]["dynagent"]["cost"] for point in points)
    assert short < long  # a shorter idle period bills less idle time
    assert "cost against p95 wait" in files["out.html"].read_text()


def test_a_pool_with_offerings_and_an_outage(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    files["pool.yaml"].write_text(MIXED)
    args = ["simulate", str(files["trace.csv"]), "--config", str(files["pool.yaml"])]
    args += ["--unavailable", "p3.2xlarge=0s-3h", "--json", str(files["out.json"])]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "pool mixed: p3.2xlarge | p3.8xlarge | p3.16xlarge, 1-8 GPUs each" in out
    assert "p3.2xlarge $3.06, p3.8xlarge $12.24, p3.16xlarge $20.00" in out
    assert "determined runs p3.16xlarge at $20.00" in out
    assert "no capacity for p3.2xlarge from 0s to 3h" in out
    document = json.loads(files["out.json"].read_text())
    ours, theirs = document["columns"]["dynagent"], document["columns"]["determined"]
    # The 1-GPU job at 7200 s found no p3.2xlarge and fell back to a p3.8xlarge.
    assert ours["refusals"] == 1 and "p3.2xlarge" not in ours["launches_by_type"]
    assert theirs["launches_by_type"] == {"p3.16xlarge": theirs["launches"]}
    assert document["baseline"] == {"instance_type": "p3.16xlarge", "price": 20.0}
    assert {"wait_p50", "wait_p95"} <= set(ours)


def test_price_is_for_a_pool_of_one_type(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    files["pool.yaml"].write_text(MIXED)
    args = ["simulate", str(files["trace.csv"]), "--config", str(files["pool.yaml"])]
    assert main([*args, "--price", "5"]) == 2
    assert "offerings.prices" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--plot", "out.png"], "PNG would need a plotting library"),
        (["--sweep", "max_idle_agent_period"], "write it like"),
        (["--sweep", "colour=red,blue"], "not a field"),
        (["--sweep", "max_idle_agent_period=soon"], "not a duration"),
        (["--heartbeat", "0s"], "--heartbeat"),
        (["--unavailable", "p3.2xlarge=5h"], "--unavailable"),
    ],
)
def test_mistakes_are_reported_before_any_run(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    assert main(["simulate", str(files["trace.csv"]), *extra]) == 2
    assert message in capsys.readouterr().err


def test_priorities_single_agent_tasks_and_the_fitting_policy(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    files["trace.csv"].write_text(
        "arrival_s,duration_s,gpus,priority,single_agent\n0,600,1,10,\n0,600,0,,true\n"
        "0,600,16,,true\n"
    )
    args = ["simulate", str(files["trace.csv"]), "--config", str(files["pool.yaml"])]
    args += ["--fitting-policy", "worst", "--json", str(files["out.json"]), "--no-progress"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "master: Determined's priority scheduler, no preemption, worst fit" in out
    assert "1 task(s) can never run in this pool" in out  # 16 GPUs kept on one agent
    document = json.loads(files["out.json"].read_text())
    assert document["fitting_policy"] == "worst"
    assert document["columns"]["dynagent"]["never_scheduled"] == 1
    assert document["columns"]["limit"]["gpu_hours"] == round(600 / 3600, 3)


def test_the_commands_defaults_are_the_simulators() -> None:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["simulate", "trace.csv"])
    assert run_options(args) == RunOptions()


def test_boots_differ_by_machine_and_repeat_by_seed(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["simulate", str(files["trace.csv"]), "--config", str(files["pool.yaml"])]
    assert main([*args, "--seed", "3", "--json", str(files["out.json"])]) == 0
    out = capsys.readouterr().out
    assert "agent registered after 360s + 3s per GPU past the first (± 20s, seed 3)" in out
    first = json.loads(files["out.json"].read_text())["columns"]
    assert main([*args, "--seed", "3", "--json", str(files["out.json"])]) == 0
    assert json.loads(files["out.json"].read_text())["columns"] == first


def test_a_pool_of_one_gpu_machines_reads_one_gpu_each(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    files["pool.yaml"].write_text(POOL.replace("p4d.24xlarge", "g5.2xlarge"))
    files["trace.csv"].write_text("arrival_s,duration_s,gpus\n0,600,1\n")
    assert main(["simulate", str(files["trace.csv"]), "--config", str(files["pool.yaml"])]) == 0
    assert "pool small: g5.2xlarge, 1 GPU each, 0..3 instances" in capsys.readouterr().out


def test_a_sweep_table_keeps_waits_of_thousands_of_hours_apart(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    # 24 jobs of 100 hours at once on one or two machines: waits of over 1,000 hours.
    files["trace.csv"].write_text("arrival_s,duration_s,gpus\n" + "0,360000,8\n" * 24)
    args = ["simulate", str(files["trace.csv"]), "--config", str(files["pool.yaml"])]
    assert main([*args, "--sweep", "max_instances=1,2", "--no-progress"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:5]]
    assert [row[:2] for row in rows] == [
        ["1", "dynagent"],
        ["1", "determined"],
        ["2", "dynagent"],
        ["2", "determined"],
    ]
    assert all(len(row) == 8 for row in rows)
    assert rows[0][4].startswith("1100h")  # p50: the 12th job waits for eleven, and a boot


def test_a_trace_of_several_pools_replays_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The default config's one pool is ``default``: its rows are replayed, the others'
    left out and counted; a trace of one other pool is replayed in it; a --pool the trace
    lacks is refused, naming the trace's pools."""
    trace = tmp_path / "mine.csv"
    trace.write_text(
        "arrival_s,duration_s,gpus,pool\n0,600,8,default\n10,600,8,a100\n20,600,1,default\n"
    )
    argv = ["simulate", str(trace), "--no-progress", "--policy", "dynagent"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "replaying the 2 jobs of pool default; left out 1 jobs of other pools (a100)" in out
    assert "mine: 2 jobs" in out
    one = tmp_path / "one.csv"
    one.write_text("arrival_s,duration_s,gpus,pool\n0,600,8,a100\n")
    assert main(["simulate", str(one), "--no-progress", "--policy", "dynagent"]) == 0
    assert "replaying pool a100's jobs of one in pool default" in capsys.readouterr().out
    assert main([*argv, "--pool", "default"]) == 0
    capsys.readouterr()
    config = tmp_path / "t4.yaml"
    config.write_text(T4_POOL_YAML)
    assert main([*argv, "--config", str(config)]) == 2
    assert "has no jobs of pool 't4'; its pools: a100, default" in capsys.readouterr().err


T4_POOL_YAML = """
resource_pools:
  - pool_name: t4
    provider:
      type: aws
      region: us-east-1
      image_id: ami-00000000000000000
      instance_type: g4dn.xlarge
      max_instances: 4
"""
