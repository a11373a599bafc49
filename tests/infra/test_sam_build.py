"""infra/aws: `sam build`'s function step (infra/aws/Makefile, then build.py) on a config
that holds both clouds' pools, run as SAM runs it: make in the function's CodeUri with
ARTIFACTS_DIR set, no AWS account and no network."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dynagent.files.config import load_config

ROOT = Path(__file__).resolve().parents[2]
MAKEFILE = ROOT / "infra" / "aws" / "Makefile"
AWS_EXAMPLE = ROOT / "infra" / "aws" / "dynagent.example.yaml"

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def gcp_pool(name: str) -> dict[str, Any]:
    # No project: the GCP deployment supplies it (DYNAGENT_GCP_PROJECT), the AWS one never.
    provider = {
        "type": "gcp",
        "zone": "us-central1-a",
        "boot_disk_source_image": "projects/p/global/images/agent",
    }
    return {"pool_name": name, "provider": provider}


def write_config(path: Path, *pools: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump({"resource_pools": list(pools)}))
    return path


def aws_pools() -> list[dict[str, Any]]:
    pools: list[dict[str, Any]] = yaml.safe_load(AWS_EXAMPLE.read_text())["resource_pools"]
    assert [p["pool_name"] for p in pools] == ["gpu", "gpu-spot"]
    return pools


def sam_build(config: Path, artifacts: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DYNAGENT_", "GOOGLE_"))}
    command = [
        "make", "--no-print-directory", "-f", str(MAKEFILE), "build-ReconcileFunction",
        f"ARTIFACTS_DIR={artifacts}", f"DYNAGENT_CONFIG_FILE={config}",
        f"SAM_BUILD_PYTHON={sys.executable}",
    ]  # fmt: skip
    return subprocess.run(
        command, cwd=ROOT / "functions" / "aws", env=env, capture_output=True, text=True
    )


def test_a_config_of_both_clouds_packs_its_aws_pools_and_names_the_gcp_ones(
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path / "pools.yaml", *aws_pools(), gcp_pool("t4"))
    built = sam_build(config, tmp_path / "out")
    assert built.returncode == 0, built.stderr
    assert "AWS pool(s) gpu, gpu-spot, managed tag managed-by=dynagent" in built.stdout
    assert "GCP pool t4 is left to infra/gcp/deploy.sh" in built.stdout
    packed = tmp_path / "out" / "dynagent.yaml"
    # The function loads what was packed, with no GCP setting in its environment.
    assert sorted(load_config(packed, environ={}).pools) == ["gpu", "gpu-spot"]
    assert (tmp_path / "out" / "app.py").is_file()
    assert not (tmp_path / "out" / "dynagent" / "gcp").exists()


def test_a_config_of_aws_pools_alone_is_packed_as_written(tmp_path: Path) -> None:
    built = sam_build(AWS_EXAMPLE, tmp_path / "out")
    assert built.returncode == 0, built.stderr
    assert "left to" not in built.stdout
    assert (tmp_path / "out" / "dynagent.yaml").read_text() == AWS_EXAMPLE.read_text()


def test_a_config_of_gcp_pools_alone_is_one_clear_line(tmp_path: Path) -> None:
    config = write_config(tmp_path / "pools.yaml", gcp_pool("t4"), gcp_pool("l4"))
    built = sam_build(config, tmp_path / "out")
    assert built.returncode != 0
    [line] = [line for line in built.stderr.splitlines() if line.startswith("build.py")]
    assert line == (
        f"build.py: {config}: no AWS pool to deploy here; GCP pools t4, l4 are left to "
        "infra/gcp/deploy.sh"
    )
    assert "Traceback" not in built.stderr
    assert not (tmp_path / "out" / "dynagent.yaml").exists()
