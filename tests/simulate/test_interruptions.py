"""Spot interruptions in the simulator: machines reclaimed at a seeded rate, tasks
resumed elsewhere, and what the warning buys dynagent in wait.

Hand-worked: boots are 180 s to a registered agent and EC2 warns 120 s before the
reclaim. dynagent launches the replacement on the warning, so a requeued task starts
again 180 - 120 = 60 s after its machine went; Determined's provisioner launches only
once the agent is gone, so its tasks wait a whole boot (plus up to its 5 s tick).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from dynagent.cli.main import main
from dynagent.core.config import ConfigError
from dynagent.simulate.boot import UNIFORM, BootModel
from dynagent.simulate.report import document, table
from dynagent.simulate.run import POLICIES, PolicyRun, RunOptions

from .builders import pool, replay_both, run, trace
from .test_fast_path import _facts, random_trace

SPOT = pool(spot=True, max_instances=8)
SPOT_POOL = """
resource_pools:
  - pool_name: spot
    provider: {type: aws, region: us-east-1, image_id: ami-0123456789abcdef0,
               instance_type: p4d.24xlarge, spot: true, max_instances: 3}
"""
LONG_JOB = trace((0, 10 * 3600, 8))


def interrupted(policy: str, rate: float = 0.5, seed: int = 0, **options: Any) -> PolicyRun:
    boot = dataclasses.replace(UNIFORM, seed=seed)
    return run(LONG_JOB, policy, SPOT, RunOptions(interruption_rate=rate, boot=boot, **options))


def test_the_warning_saves_dynagent_all_but_a_minute_of_the_boot() -> None:
    ours, theirs = interrupted("dynagent"), interrupted("determined")
    assert ours.interruptions > 0 and ours.requeued == ours.interruptions
    assert ours.restart_waits == [60] * ours.requeued
    assert theirs.requeued > 0 and all(180 <= wait <= 185 for wait in theirs.restart_waits)


@pytest.mark.parametrize("policy", POLICIES)
def test_a_resumed_task_does_only_its_own_work(policy: str) -> None:
    result = interrupted(policy)
    assert result.usage.busy == 10 * 3600 * 8  # every second of the job, once
    assert result.waits == [180] and result.never_scheduled == 0


def test_the_rate_is_seeded() -> None:
    assert _facts(interrupted("dynagent", seed=4)) == _facts(interrupted("dynagent", seed=4))
    counts = {interrupted("dynagent", seed=seed).interruptions for seed in range(4)}
    assert len(counts) > 1
    assert interrupted("dynagent", rate=0).interruptions == 0
    assert _facts(interrupted("dynagent", rate=0)) == _facts(run(LONG_JOB, "dynagent", SPOT))


@pytest.mark.parametrize("seed", [2, 5])
@pytest.mark.parametrize("policy", POLICIES)
def test_the_fast_path_matches_the_exhaustive_run_with_interruptions(
    policy: str, seed: int
) -> None:
    jobs = random_trace(seed + 1, jobs=60)
    options = {"interruption_rate": 1.0, "boot": BootModel(jitter=30, seed=seed)}
    fast = run(jobs, policy, SPOT, RunOptions(**options))
    slow = run(jobs, policy, SPOT, RunOptions(exhaustive=True, **options))
    assert fast.interruptions > 0
    assert _facts(fast) == _facts(slow)
    assert fast.restart_waits == slow.restart_waits


def test_the_report_counts_interruptions_and_their_wait() -> None:
    result = replay_both(LONG_JOB, SPOT, interruption_rate=0.5)
    lines = table(result).splitlines()
    row = next(line for line in lines if line.startswith("spot interruptions")).split()
    count = interrupted("dynagent").interruptions
    assert row[2:] == [str(count), str(count), "-"]
    mean = next(line for line in lines if line.startswith("  wait to restart, mean")).split()
    assert mean[4] == "1m" and mean[5] != "1m" and mean[6] == "-"
    body = document(result)
    assert body["interruption_rate_per_machine_hour"] == 0.5
    assert body["columns"]["dynagent"]["restart_wait_max"] == 60
    # Without a rate the table is as it was: no interruption rows.
    assert "spot interruptions" not in table(replay_both(LONG_JOB, SPOT))


def test_a_pool_that_buys_no_spot_is_refused_a_rate() -> None:
    with pytest.raises(ConfigError, match="no spot"):
        replay_both(LONG_JOB, pool(), interruption_rate=0.5)
    with pytest.raises(ConfigError, match="negative"):
        replay_both(LONG_JOB, SPOT, interruption_rate=-1)


def test_the_command_takes_a_rate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "trace.csv").write_text("arrival_s,duration_s,gpus\n0,36000,8\n")
    (tmp_path / "pool.yaml").write_text(SPOT_POOL)
    args = ["simulate", str(tmp_path / "trace.csv"), "--config", str(tmp_path / "pool.yaml")]
    assert main([*args, "--interruption-rate", "0.5", "--seed", "1", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "spot machines reclaimed at 0.5 per machine-hour (seed 1)" in out
    assert "wait to restart, max" in out
