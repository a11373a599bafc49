"""``dynagent doctor`` on GCP: a well-formed project passes, and each thing a first launch
would trip on is reported with its fix, through the real google-cloud-compute and Pub/Sub
clients and google-auth's impersonation, against the local Compute, the local topics API
and the local IAM."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from dynagent.cli.doctor.findings import Finding, Status
from dynagent.cli.doctor.gcp import check
from dynagent.cli.doctor.gcp.access import ACT_AS, PERMISSIONS
from dynagent.cli.main import main
from dynagent.core.config import Config
from dynagent.testing.gcp.iam import account_resource

from .gcp_project import AGENTS, FUNCTIONS, IMAGES, NAME, PROJECT, Project

ROOT = Path(__file__).resolve().parents[2]
SUBNETWORK = "regions/us-central1/subnetworks/train-a"


def run(
    project: Project, config: Config | None = None, deployed: str | None = PROJECT
) -> list[Finding]:
    config = config or project.config()
    return check(list(config.pools.values()), project.apis(), deployed, NAME)


def not_ok(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.status is not Status.OK]


def test_a_well_formed_project_passes_every_check(project: Project) -> None:
    findings = run(project)
    assert not_ok(findings) == []
    checks = [f.check for f in findings]
    # Three pools: image, machines (a100 has two), quotas, network each; then the account.
    assert checks.count("gcp.image") == 3 and checks.count("gcp.machine_type") == 4
    assert checks.count("gcp.network") == 3 and checks.count("gcp.topic") == 4
    assert checks.count("gcp.permissions") == 1 and checks.count("gcp.act_as") == 1
    quotas = [f.what for f in findings if f.check == "gcp.quota"]
    assert quotas == [
        "pool t4: GPU quota NVIDIA_T4_GPUS in us-central1",
        "pool t4: GPU quota GPUS_ALL_REGIONS of project dyn-proj",
        "pool a100: GPU quota NVIDIA_A100_GPUS in us-central1",
        "pool a100: GPU quota PREEMPTIBLE_NVIDIA_A100_GPUS in us-central1",
        "pool a100: GPU quota GPUS_ALL_REGIONS of project dyn-proj",
        "pool l4: GPU quota PREEMPTIBLE_NVIDIA_L4_GPUS in europe-west4",
        "pool l4: GPU quota GPUS_ALL_REGIONS of project dyn-proj",
    ]
    # The permissions were tested as the functions' account, which the admin acted as.
    assert project.iam.calls.snapshot()[0] == (
        f"POST /v1/projects/-/serviceAccounts/{FUNCTIONS}:generateAccessToken"
    )


# --- Seeded failures, each with its fix -------------------------------------------------------


@pytest.mark.parametrize(
    ("image", "why"),
    [
        (f"projects/{IMAGES}/global/images/det-agent-9", "no such image"),
        (f"projects/{IMAGES}/global/images/family/det-gone", "no such image"),
        (f"projects/{IMAGES}/global/images/private", "not readable: Required 'compute.images.get"),
    ],
)
def test_a_missing_or_unreadable_image_fails(project: Project, image: str, why: str) -> None:
    project.compute.catalog.add_image(IMAGES, "private", readable=False)
    t4 = project.pool("t4")
    t4["provider"]["boot_disk_source_image"] = image
    (failed,) = not_ok(run(project, project.config(t4), None)[:-1])
    assert (failed.check, failed.what) == ("gcp.image", f"pool t4: boot image {image}")
    assert failed.why.startswith(why)
    assert f"--project {IMAGES}" in failed.fix or "roles/compute.imageUser" in failed.fix


def test_a_gpu_quota_of_zero_fails_and_one_below_max_instances_warns(project: Project) -> None:
    project.compute.catalog.set_quota(PROJECT, "NVIDIA_T4_GPUS", 0, region="us-central1")
    project.compute.catalog.set_quota(
        PROJECT, "PREEMPTIBLE_NVIDIA_L4_GPUS", 2, region="europe-west4"
    )
    findings = not_ok(run(project, project.config(project.pool("t4"), project.pool("l4")), None))
    zero, low = findings[0], findings[1]
    assert (zero.status, zero.what) == (
        Status.FAIL,
        "pool t4: GPU quota NVIDIA_T4_GPUS in us-central1",
    )
    assert zero.why == "0 GPUs, one n1-standard-8 needs 4"
    assert (
        zero.fix
        == "request 12 GPUs of NVIDIA_T4_GPUS in us-central1 (console: IAM & Admin > Quotas)"
    )
    assert (low.status, low.why) == (
        Status.WARN,
        "2 GPUs: one g2-standard-8 (1) fits, max_instances 4 need 4",
    )


def test_spot_without_preemptible_quota_draws_on_the_standard_one(project: Project) -> None:
    project.compute.catalog.set_quota(
        PROJECT, "PREEMPTIBLE_NVIDIA_L4_GPUS", 0, region="europe-west4"
    )
    l4 = project.pool("l4")
    findings = run(project, project.config(l4), None)
    (zero,) = not_ok(findings)[:1]
    assert zero.what == "pool l4: GPU quota PREEMPTIBLE_NVIDIA_L4_GPUS in europe-west4"
    assert zero.why == "0 GPUs, one g2-standard-8 needs 1"
    project.compute.catalog.set_quota(PROJECT, "NVIDIA_L4_GPUS", 4, region="europe-west4")
    quota = next(f for f in run(project, project.config(l4), None) if f.check == "gcp.quota")
    assert quota.status is Status.OK
    assert quota.what == (
        "pool l4: GPU quota NVIDIA_L4_GPUS in europe-west4 "
        "(for spot: no PREEMPTIBLE_NVIDIA_L4_GPUS)"
    )


def test_a_machine_or_gpu_not_offered_in_a_zone_fails(project: Project) -> None:
    project.compute.catalog.withhold("us-central1-b", "a2-highgpu-4g")
    project.compute.catalog.withhold("us-central1-b", "nvidia-tesla-a100")
    small, large = not_ok(run(project, project.config(project.pool("a100")), None)[:-1])
    zones = "us-central1-a, us-central1-b"
    assert small.what == f"pool a100: a2-highgpu-1g + 1 x nvidia-tesla-a100 in {zones}"
    assert small.why == "us-central1-b has no GPU nvidia-tesla-a100"
    assert large.what == f"pool a100: a2-highgpu-4g + 4 x nvidia-tesla-a100 in {zones}"
    assert large.why == (
        "us-central1-b has no machine type a2-highgpu-4g; "
        "us-central1-b has no GPU nvidia-tesla-a100"
    )
    assert "offerings.zones" in large.fix


@pytest.mark.parametrize(
    ("interface", "why"),
    [
        ({"network": "global/networks/gone"}, f"project {PROJECT} has no network gone"),
        ({"network": "global/networks/train"},
         "train is a custom-mode network: a VM needs a subnetwork of it"),
        ({"network": "global/networks/train", "subnetwork": "regions/us-east1/subnetworks/train-a"},
         "the subnetwork is in us-east1, the pool in us-central1"),
        ({"network": "global/networks/default", "subnetwork": SUBNETWORK},
         "the subnetwork is on network train, not default"),
    ],
)  # fmt: skip
def test_a_network_or_subnetwork_that_cannot_hold_the_pool_fails(
    project: Project, interface: dict[str, str], why: str
) -> None:
    a100 = project.pool("a100")
    a100["provider"]["network_interface"] = interface
    (failed,) = not_ok(run(project, project.config(a100), None)[:-1])
    assert (failed.check, failed.why) == ("gcp.network", why)


def test_a_service_account_without_act_as_fails_with_the_binding_to_add(project: Project) -> None:
    project.iam.revoke(f"serviceAccount:{FUNCTIONS}", account_resource(AGENTS), [ACT_AS])
    (failed,) = not_ok(run(project, project.config(project.pool("t4"))))
    assert failed.what == f"functions' account {FUNCTIONS} may act as the agents' {AGENTS}"
    assert failed.why == f"no {ACT_AS}: every launch of a VM running as {AGENTS} is refused"
    assert failed.fix == (
        f"gcloud iam service-accounts add-iam-policy-binding {AGENTS} "
        f"--member=serviceAccount:{FUNCTIONS} --role=roles/iam.serviceAccountUser"
    )


def test_a_permission_the_functions_use_missing_fails(project: Project) -> None:
    taken = ["compute.instances.create", "compute.instances.setServiceAccount"]
    project.iam.revoke(f"serviceAccount:{FUNCTIONS}", f"projects/{PROJECT}", taken)
    (failed,) = not_ok(run(project, project.config(project.pool("t4"))))
    assert failed.why == "lacks compute.instances.create, compute.instances.setServiceAccount"
    assert failed.fix.startswith("run infra/gcp/deploy.sh again with this config")
    # A pool whose VMs run as no service account needs no setServiceAccount.
    a100 = project.pool("a100")
    project.iam.grant(
        f"serviceAccount:{FUNCTIONS}", f"projects/{PROJECT}", ["compute.instances.create"]
    )
    assert not_ok(run(project, project.config(a100))) == []


def test_without_token_creator_the_account_is_not_checked(project: Project) -> None:
    project.iam.reset()  # the admin may no longer act as the functions' account
    unknown = not_ok(run(project, project.config(project.pool("t4"))))
    assert [(f.check, f.status) for f in unknown] == [
        ("gcp.permissions", Status.UNKNOWN),
        ("gcp.act_as", Status.UNKNOWN),
    ]
    assert unknown[0].why.startswith(f"cannot act as {FUNCTIONS} to test it")
    assert "roles/iam.serviceAccountTokenCreator" in unknown[0].fix


def test_a_missing_topic_fails(project: Project) -> None:
    del project.topics.topics[f"projects/{PROJECT}/topics/{NAME}-sweep"]
    (failed,) = not_ok(run(project, project.config(project.pool("a100"))))
    assert (failed.what, failed.why) == (
        f"topic projects/{PROJECT}/topics/{NAME}-sweep",
        "no such topic",
    )
    assert failed.fix == f"deploy: infra/gcp/deploy.sh --project {PROJECT} --name {NAME}"


def test_the_permissions_are_what_deploy_sh_grants() -> None:
    script = (ROOT / "infra" / "gcp" / "deploy.sh").read_text()
    block = re.search(r"BASE_PERMISSIONS=\((.*?)\n\)", script, re.DOTALL)
    assert block is not None
    granted = re.findall(r"^\s*(compute\.[a-zA-Z.]+)", block.group(1), re.MULTILINE)
    assert tuple(granted) == PERMISSIONS


# --- The command ------------------------------------------------------------------------------


def test_without_google_credentials_one_line_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))  # no gcloud login here
    monkeypatch.setenv("NO_GCE_CHECK", "True")  # not on a Compute Engine VM either
    config = tmp_path / "pools.yaml"
    config.write_text(yaml.safe_dump({"resource_pools": [Project.pool("t4")]}))
    assert main(["doctor", "--config", str(config), "--project", PROJECT]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        "dynagent: pool t4 (gcp) not checked: no Google Cloud credentials found: run `gcloud "
        "auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to a service "
        "account key file"
    ]


def test_each_reservation_a_pool_names_is_found_and_matched_or_its_fix_given(
    project: Project,
) -> None:
    t4 = project.pool("t4")
    t4["provider"]["reservations"] = ["t4-reserved", "t4-gone", "a2-reserved"]
    t4_gpus = [("nvidia-tesla-t4", 4)]
    compute = project.compute
    compute.create_reservation(
        "t4-reserved", "us-central1-a", "n1-standard-8", 2, accelerators=t4_gpus, project=PROJECT
    )
    compute.create_reservation("a2-reserved", "us-central1-a", "a2-highgpu-1g", 1, project=PROJECT)

    findings = [f for f in run(project, project.config(t4)) if f.check == "gcp.reservation"]

    by_name = {f.what.split("reservation ")[1].split(" ")[0]: f for f in findings}
    assert by_name["t4-reserved"].status is Status.OK
    assert "2 x n1-standard-8 in us-central1-a, 2 free" in by_name["t4-reserved"].what
    assert by_name["t4-gone"].status is Status.FAIL
    assert "not found in the pool's zones (us-central1-a)" in by_name["t4-gone"].why
    assert by_name["a2-reserved"].status is Status.FAIL
    assert "a2-highgpu-1g, which the pool does not launch" in by_name["a2-reserved"].why
    # The functions must read reservations: doctor asks for that permission too.
    permissions = [f for f in run(project, project.config(t4)) if f.check == "gcp.permissions"]
    assert permissions and permissions[0].status is Status.FAIL
    assert "compute.reservations.get" in permissions[0].why
