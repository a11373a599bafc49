"""``dynagent plan`` on a GCP pool: the real command against the local Compute Engine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from dynagent.cli.main import main
from dynagent.gcp import clients
from dynagent.gcp.clients import COMPUTE_ENDPOINT_ENV
from dynagent.testing.gcp.compute import LocalCompute

from .helpers import gcp_pool_document, snapshot


@pytest.fixture
def on_local_compute(compute: LocalCompute, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The command's Compute clients, built from its environment, reach the local one."""
    monkeypatch.setenv(COMPUTE_ENDPOINT_ENV, compute.endpoint)
    clients.instances_client.cache_clear()
    clients.zone_operations_client.cache_clear()
    yield
    clients.instances_client.cache_clear()
    clients.zone_operations_client.cache_clear()


def test_plan_reads_a_gcp_pool_and_changes_nothing(
    on_local_compute: None,
    compute: LocalCompute,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text(yaml.safe_dump({"resource_pools": [gcp_pool_document()]}))
    file = tmp_path / "s.json"
    file.write_text(snapshot(3, pool="t4", pending=[("trial", 4)]).to_json())
    assert main(["plan", "--config", str(path), "--snapshot", str(file)]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [
        "pool t4: 0 instances observed",
        "  launch 1 n1-standard-32 + 4 x nvidia-tesla-t4 on-demand in us-central1-a ($2.92/h): "
        "pending tasks: trial",
    ]
    assert captured.err == ""
    assert compute.instances() == []
    assert set(compute.call_names()) == {"instances.list"}  # reads, and nothing else
