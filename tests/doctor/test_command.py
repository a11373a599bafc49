"""``dynagent doctor`` as a user runs it: one config holding AWS and GCP pools, each cloud
asked with its own credentials from the environment, against the local clouds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from dynagent.cli.doctor.gcp_environment import IAM_ENDPOINT_ENV
from dynagent.cli.main import main
from dynagent.gcp.clients import COMPUTE_ENDPOINT_ENV
from dynagent.gcp.status import PUBSUB_ENDPOINT_ENV
from dynagent.testing.aws.local_aws import LocalAws

from .aws_account import STACK, well_formed
from .gcp_project import FUNCTIONS, PROJECT, Project

DOCTOR = f"doctor@{PROJECT}.iam.gserviceaccount.com"


def key_file(path: Path, token_uri: str) -> Path:
    """A service account key, as `gcloud iam service-accounts keys create` writes one,
    whose tokens come from ``token_uri``."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    path.write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": PROJECT,
                "private_key_id": "0d0c70",
                "private_key": pem.decode(),
                "client_email": DOCTOR,
                "client_id": "1",
                "token_uri": token_uri,
            }
        )
    )
    return path


def test_one_config_for_both_clouds_passes_every_check(
    aws: LocalAws,
    project: Project,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
) -> None:
    account = well_formed(aws)
    project.iam.allow_impersonation(f"serviceAccount:{DOCTOR}", FUNCTIONS)
    config = tmp_path / "pools.yaml"
    pools = [account.pool("big"), Project.pool("t4"), Project.pool("a100")]
    config.write_text(yaml.safe_dump({"resource_pools": pools}))
    environment = {
        **aws.env(),
        "GOOGLE_APPLICATION_CREDENTIALS": str(
            key_file(tmp_path / "key.json", f"{project.iam.endpoint}/token")
        ),
        COMPUTE_ENDPOINT_ENV: project.compute.endpoint,
        PUBSUB_ENDPOINT_ENV: project.topics.endpoint,
        IAM_ENDPOINT_ENV: project.iam.endpoint,
    }
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    argv = ["doctor", "--config", str(config), "--stack", STACK, "--project", PROJECT]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == f"{len(lines) - 1} passed, 0 failed, 0 warnings, 0 not checked"
    text = "\n".join(lines)
    assert "✔ pool big: AMI " in text and "✔ stack dyn: role ReconcileRole" in text
    assert "✔ pool t4: boot image " in text and "✔ pool a100: GPU quota " in text
    assert f"✔ functions' account {FUNCTIONS}: Compute Engine permissions" in text
    # Each pool was checked once, by its own cloud.
    assert "pool t4: AMI" not in text and "pool big: boot image" not in text


def test_an_unknown_pool_is_one_line(tmp_path: Path, capsys: Any) -> None:
    config = tmp_path / "pools.yaml"
    config.write_text(yaml.safe_dump({"resource_pools": [Project.pool("t4")]}))
    assert main(["doctor", "--config", str(config), "--pool", "nope"]) == 2
    assert capsys.readouterr().err == "dynagent: pool 'nope' is not configured (configured: t4)\n"


def test_a_cloud_without_credentials_is_named_and_the_other_is_checked(
    aws: LocalAws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    account = well_formed(aws)
    for name, value in aws.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))  # no gcloud login here
    monkeypatch.setenv("NO_GCE_CHECK", "True")  # not on a Compute Engine VM either
    config = tmp_path / "pools.yaml"
    pools = [account.pool("big"), Project.pool("t4"), Project.pool("l4")]
    config.write_text(yaml.safe_dump({"resource_pools": pools}))
    assert main(["doctor", "--config", str(config), "--json"]) == 1
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["failed"] is False
    assert {c["what"].split(":")[0] for c in report["checks"]} >= {"pool big"}
    assert not any(c["what"].startswith(("pool t4", "pool l4")) for c in report["checks"])
    (skipped,) = report["skipped"]
    assert skipped.startswith("pools t4, l4 (gcp) not checked: no Google Cloud credentials")
    assert captured.err == f"dynagent: {skipped}\n"
