"""infra/gcp/deploy.sh: the GCP deployment it prints (--dry-run) and the one it runs.

Dry runs get a fake ``gcloud`` first on PATH that fails the test if it is called at all.
The runs without --dry-run get a fake that records each call and answers lookups: they
check that the script creates what is missing, leaves what exists, and runs the
commands a dry run prints. ``--delete`` (which looks, even in a dry run) runs against
fake_gcloud.py, a project kept in a JSON file, built from what a create dry run makes;
and once with the real gcloud against the Pub/Sub emulator, for the topics.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra" / "gcp"
SCRIPT = INFRA / "deploy.sh"
EXAMPLE = INFRA / "dynagent.example.yaml"
AWS_EXAMPLE = ROOT / "infra" / "aws" / "dynagent.example.yaml"

PROJECT = "my-gpu-project"  # the example config's
REGION = "us-central1"
FN_ACCOUNT = f"dynagent-fn@{PROJECT}.iam.gserviceaccount.com"
AGENT_ACCOUNT = f"determined-agent@{PROJECT}.iam.gserviceaccount.com"
DEAD_LETTERS = f"projects/{PROJECT}/topics/dynagent-dead-letters"
DRAIN_NOTICES = f"projects/{PROJECT}/topics/dynagent-drain-notices"
BASE_PERMISSIONS = {
    "compute.instances.list", "compute.instances.get", "compute.instances.create",
    "compute.instances.delete", "compute.instances.stop", "compute.instances.start",
    "compute.instances.setLabels", "compute.instances.setMetadata",
    "compute.disks.create", "compute.images.useReadOnly", "compute.images.get",
    "compute.subnetworks.use",
    "compute.zoneOperations.get",
}  # fmt: skip
SERVICES = {
    "cloudfunctions.googleapis.com", "run.googleapis.com", "eventarc.googleapis.com",
    "pubsub.googleapis.com", "cloudscheduler.googleapis.com", "cloudbuild.googleapis.com",
    "compute.googleapis.com", "artifactregistry.googleapis.com", "iam.googleapis.com",
    "logging.googleapis.com", "monitoring.googleapis.com",
}  # fmt: skip

# What the recording fake answers to the lookups whose output the script uses.
FAKE_TRIGGER = "dynagent-reconcile-123456"
FAKE_SUBSCRIPTION = f"projects/{PROJECT}/subscriptions/eventarc-us-central1-{FAKE_TRIGGER}-sub-1"
FAKE_PROJECT_NUMBER = "123456789012"
FAKE_CHANNEL = f"projects/{PROJECT}/notificationChannels/4242"
FAKE_FOUND = f"projects/{PROJECT}/found/1"  # what a list finds when things exist

FAILING_GCLOUD = """#!/bin/sh
echo "$*" >> "{marker}"
echo "fake gcloud: a dry run must not call gcloud" >&2
exit 97
"""

RECORDING_GCLOUD = """#!{python}
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_GCLOUD_LOG"], "a") as log:
    log.write(json.dumps(args) + "\\n")
exists = os.environ.get("FAKE_GCLOUD_EXISTS") == "1"
words = [a for a in args if not a.startswith("-")]
if words[:2] == ["functions", "describe"]:
    print("{trigger}")
elif words[:3] == ["eventarc", "triggers", "describe"]:
    print("{subscription}")
elif words[:2] == ["projects", "describe"]:
    print("{number}")
elif words[:4] == ["beta", "monitoring", "channels", "create"]:
    print("{channel}")
elif words[:3] == ["iam", "roles", "describe"] and "--format=value(deleted)" in args:
    if exists and os.environ.get("FAKE_GCLOUD_ROLE_DELETED") == "1":
        print("True")
elif "list" in words[:4]:
    if exists:
        print("{found}")
elif "get-iam-policy" in words:
    if exists:
        print(open(os.environ["FAKE_GCLOUD_EXPRESSION"]).read().strip())
elif "describe" in words and not exists:
    print("ERROR: (gcloud) NOT_FOUND", file=sys.stderr)
    sys.exit(1)
"""


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str

    @property
    def commands(self) -> list[list[str]]:
        """The gcloud command lines, split as a shell splits them."""
        return [shlex.split(line) for line in self.stdout.splitlines() if line.startswith("gcloud")]

    @property
    def captures(self) -> dict[str, list[str]]:
        """``VAR=$(gcloud ...)`` lines: the lookups a dry run leaves to the reader's shell."""
        found = {}
        for line in self.stdout.splitlines():
            match = re.fullmatch(r"([A-Z_]+)=\$\((gcloud .*)\)", line)
            if match:
                found[match.group(1)] = shlex.split(match.group(2))
        return found

    @property
    def source(self) -> Path:
        [path] = re.findall(r"^# staged function source: (.+)$", self.stdout, re.MULTILINE)
        return Path(path)

    def find(self, *words: str) -> list[list[str]]:
        """Commands that start with ``gcloud`` and then ``words``."""
        return [c for c in self.commands if c[1 : 1 + len(words)] == list(words)]

    def one(self, *words: str) -> list[str]:
        matches = self.find(*words)
        assert len(matches) == 1, f"expected one 'gcloud {' '.join(words)}', got {matches}"
        return matches[0]


def compute_role(run: Run) -> list[str]:
    """The ``gcloud iam roles create`` of the Compute Engine role (the other custom role
    is the snapshot topic's labels, for `dynagent status`)."""
    [command] = [c for c in run.find("iam", "roles", "create") if c[4].endswith("_compute")]
    return command


def flags(command: Iterable[str]) -> dict[str, str]:
    """``--name=value`` (and bare ``--name``, as "") of one command."""
    parsed = {}
    for word in command:
        if word.startswith("--"):
            name, _, value = word[2:].partition("=")
            assert name not in parsed, f"--{name} given twice in {command}"
            parsed[name] = value
    return parsed


def env_vars(command: list[str]) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in flags(command)["set-env-vars"].split(","))


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def script_env(tmp_path: Path, fake: str, **extra: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    _executable(bin_dir / "gcloud", fake)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNAGENT_")}
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        TMPDIR=str(work),  # the script's staging directory lands in the test's tmp_path
        DYNAGENT_PYTHON=sys.executable,
        **extra,
    )
    return env


def deploy(env: dict[str, str], *args: str, dry_run: bool = True) -> Run:
    command = ["bash", str(SCRIPT), *(["--dry-run"] if dry_run else []), *args]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    return Run(done.returncode, done.stdout, done.stderr)


def dry_run(tmp_path: Path, *args: str, config: Path = EXAMPLE) -> Run:
    marker = tmp_path / "gcloud-was-called"
    env = script_env(tmp_path, FAILING_GCLOUD.format(marker=marker))
    result = deploy(env, "--project", PROJECT, "--region", REGION, "--config", str(config), *args)
    assert not marker.exists(), f"a dry run called gcloud: {marker.read_text()}"
    return result


@pytest.fixture
def printed(tmp_path: Path) -> Run:
    """The dry run of the example config."""
    result = dry_run(tmp_path)
    assert result.returncode == 0, result.stderr
    return result


def write_config(path: Path, *pools: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump({"resource_pools": list(pools)}))
    return path


def gcp_pool(name: str, **fields: Any) -> dict[str, Any]:
    provider = {
        "type": "gcp",
        "project": PROJECT,
        "zone": "us-central1-a",
        "boot_disk_source_image": f"projects/{PROJECT}/global/images/agent",
        **fields,
    }
    return {"pool_name": name, "provider": provider}


# --------------------------------------------------------------------------------------
# The dry run of the example: every resource, with the right settings
# --------------------------------------------------------------------------------------


def test_every_service_is_enabled(printed: Run) -> None:
    command = printed.one("services", "enable")
    assert set(command[3:-1]) == SERVICES
    assert flags(command) == {"project": PROJECT}


def test_four_topics_a_subscription_that_keeps_dead_letters_and_one_for_the_bridge(
    printed: Run,
) -> None:
    topics = [c[4] for c in printed.find("pubsub", "topics", "create")]
    assert topics == [
        "dynagent-snapshots",
        "dynagent-sweep",
        "dynagent-dead-letters",
        "dynagent-drain-notices",
    ]
    subscriptions = {c[4]: flags(c) for c in printed.find("pubsub", "subscriptions", "create")}
    assert set(subscriptions) == {"dynagent-dead-letters", "dynagent-drain-notices"}
    for name, options in subscriptions.items():
        assert options["topic"] == name
        assert options["expiration-period"] == "never"
    assert subscriptions["dynagent-dead-letters"]["message-retention-duration"] == "7d"
    # Drain notices are sent again every pass: an old one is worth nothing.
    assert subscriptions["dynagent-drain-notices"]["message-retention-duration"] == "1h"


def test_a_service_account_for_the_functions(printed: Run) -> None:
    command = printed.one("iam", "service-accounts", "create")
    assert command[4] == "dynagent-fn" and flags(command)["project"] == PROJECT


def test_a_custom_role_with_just_the_compute_permissions_used(printed: Run) -> None:
    command = compute_role(printed)
    assert command[4] == "dynagent_compute"
    permissions = set(flags(command)["permissions"].split(","))
    # The example's pools set a service account and network tags, no external IP.
    assert permissions == BASE_PERMISSIONS | {
        "compute.instances.setServiceAccount",
        "compute.instances.setTags",
    }


def test_the_role_is_bound_with_a_condition_naming_each_pools_zone_and_prefix(
    printed: Run,
) -> None:
    command = printed.one("projects", "add-iam-policy-binding")
    assert command[3] == PROJECT
    options = flags(command)
    assert options["member"] == f"serviceAccount:{FN_ACCOUNT}"
    assert options["role"] == f"projects/{PROJECT}/roles/dynagent_compute"
    condition = json.loads(Path(options["condition-from-file"]).read_text())
    expression = condition["expression"]
    assert condition["title"]
    for zone, prefix in [
        ("us-central1-a", "det-dynamic-agent-"),
        ("us-central1-b", "det-spot-agent-"),
    ]:
        for kind in ("instances", "disks"):
            name = f"projects/{PROJECT}/zones/{zone}/{kind}/{prefix}"
            assert f'resource.name.startsWith("{name}")' in expression
    # Everything that is not an instance or a disk is outside the name restriction.
    assert expression.startswith(
        '(resource.type != "compute.googleapis.com/Instance" && '
        'resource.type != "compute.googleapis.com/Disk") || '
    )
    assert expression.count("startsWith") == 4


def test_act_as_only_on_the_agents_service_account(printed: Run) -> None:
    command = printed.one("iam", "service-accounts", "add-iam-policy-binding")
    assert command[4] == AGENT_ACCOUNT
    assert flags(command)["role"] == "roles/iam.serviceAccountUser"
    assert flags(command)["member"] == f"serviceAccount:{FN_ACCOUNT}"
    project_roles = [flags(c)["role"] for c in printed.find("projects", "add-iam-policy-binding")]
    assert "roles/iam.serviceAccountUser" not in project_roles


def test_the_functions_may_publish_dead_letters_and_drain_notices(printed: Run) -> None:
    published = [
        c[4]
        for c in printed.find("pubsub", "topics", "add-iam-policy-binding")
        if flags(c)["member"] == f"serviceAccount:{FN_ACCOUNT}"
        and flags(c)["role"] == "roles/pubsub.publisher"
    ]
    assert published == ["dynagent-dead-letters", "dynagent-drain-notices"]
    # The functions publish notices; only the bridge reads them.
    assert not [
        c
        for c in printed.find("pubsub", "subscriptions", "add-iam-policy-binding")
        if flags(c)["member"] == f"serviceAccount:{FN_ACCOUNT}"
    ]


@pytest.mark.parametrize(
    ("function", "entry_point", "topic", "retry"),
    [
        ("dynagent-reconcile", "reconcile", "dynagent-snapshots", True),
        ("dynagent-sweep", "sweep", "dynagent-sweep", False),
    ],
)
def test_each_function_runs_alone_with_its_entry_point_topic_and_env(
    printed: Run, function: str, entry_point: str, topic: str, retry: bool
) -> None:
    [command] = [c for c in printed.find("functions", "deploy") if c[3] == function]
    options = flags(command)
    assert "gen2" in options
    assert options["max-instances"] == "1" and options["concurrency"] == "1"
    assert options["entry-point"] == entry_point
    assert options["trigger-topic"] == topic
    assert options["service-account"] == options["trigger-service-account"] == FN_ACCOUNT
    assert options["ingress-settings"] == "internal-only"
    assert re.fullmatch(r"python3(1[2-9])", options["runtime"])
    assert options["region"] == REGION and options["project"] == PROJECT
    assert ("retry" in options) is retry
    assert env_vars(command) == {
        "DYNAGENT_CONFIG": "dynagent.yaml",
        "DYNAGENT_DEAD_LETTER_TOPIC": DEAD_LETTERS,
        "DYNAGENT_SNAPSHOT_TOPIC": f"projects/{PROJECT}/topics/dynagent-snapshots",
        "DYNAGENT_DRAIN_NOTICE_TOPIC": DRAIN_NOTICES,
        "DYNAGENT_GCP_PROJECT": PROJECT,
    }
    assert Path(options["source"]) == printed.source
    invoker = [
        c for c in printed.find("functions", "add-invoker-policy-binding") if c[3] == function
    ]
    assert [flags(c)["member"] for c in invoker] == [f"serviceAccount:{FN_ACCOUNT}"]


def test_the_reconcile_trigger_dead_letters_after_five_deliveries(printed: Run) -> None:
    lookups = printed.captures
    assert lookups["TRIGGER"][1:4] == ["functions", "describe", "dynagent-reconcile"]
    assert lookups["SUBSCRIPTION"][1:5] == ["eventarc", "triggers", "describe", "${TRIGGER}"]
    assert lookups["PROJECT_NUMBER"][1:4] == ["projects", "describe", PROJECT]
    update = printed.one("pubsub", "subscriptions", "update")
    assert update[4] == "${SUBSCRIPTION}"
    assert flags(update)["dead-letter-topic"] == DEAD_LETTERS
    assert flags(update)["max-delivery-attempts"] == "5"
    agent = "serviceAccount:service-${PROJECT_NUMBER}@gcp-sa-pubsub.iam.gserviceaccount.com"
    forwarding = {
        (flags(c)["role"], c[4])
        for c in printed.find("pubsub")
        if "add-iam-policy-binding" in c and flags(c).get("member") == agent
    }
    assert forwarding == {
        ("roles/pubsub.publisher", "dynagent-dead-letters"),
        ("roles/pubsub.subscriber", "${SUBSCRIPTION}"),
    }


def test_the_sweep_is_scheduled_every_minute(printed: Run) -> None:
    command = printed.one("scheduler", "jobs", "create", "pubsub")
    options = flags(command)
    assert command[5] == "dynagent-sweep"
    assert options["schedule"] == "* * * * *"
    assert options["topic"] == f"projects/{PROJECT}/topics/dynagent-sweep"
    assert options["location"] == REGION


def _snapshot_publishers(run: Run) -> list[tuple[str, str]]:
    return [
        (flags(c)["member"], flags(c)["role"])
        for c in run.find("pubsub", "topics", "add-iam-policy-binding")
        if c[4] == "dynagent-snapshots" and flags(c)["role"] == "roles/pubsub.publisher"
    ]


def test_the_reconcile_function_may_only_read_and_label_the_snapshot_topic(
    printed: Run,
) -> None:
    [role] = [c for c in printed.find("iam", "roles", "create") if c[4] == "dynagent_status"]
    assert flags(role)["project"] == PROJECT
    assert set(flags(role)["permissions"].split(",")) == {
        "pubsub.topics.get",
        "pubsub.topics.update",
    }
    granted = [
        (c[4], flags(c)["member"])
        for c in printed.find("pubsub", "topics", "add-iam-policy-binding")
        if flags(c)["role"] == f"projects/{PROJECT}/roles/dynagent_status"
    ]
    assert granted == [("dynagent-snapshots", f"serviceAccount:{FN_ACCOUNT}")]


def _drain_notice_readers(run: Run) -> list[tuple[str, str]]:
    return [
        (flags(c)["member"], flags(c)["role"])
        for c in run.find("pubsub", "subscriptions", "add-iam-policy-binding")
        if c[4] == "dynagent-drain-notices"
    ]


def test_without_a_bridge_account_nobody_is_granted_the_snapshot_topic(printed: Run) -> None:
    assert _snapshot_publishers(printed) == []
    assert _drain_notice_readers(printed) == []
    assert "no --bridge-service-account" in printed.stdout
    assert "roles/pubsub.subscriber on the subscription dynagent-drain-notices" in printed.stdout


BRIDGE_ACCOUNT = f"dynagent-bridge@{PROJECT}.iam.gserviceaccount.com"


def test_a_bridge_account_may_publish_snapshots_and_read_drain_notices_and_nothing_else(
    tmp_path: Path,
) -> None:
    other = "bridge-2@other-project.iam.gserviceaccount.com"
    result = dry_run(
        tmp_path, "--bridge-service-account", BRIDGE_ACCOUNT, "--bridge-service-account", other
    )
    assert result.returncode == 0, result.stderr
    assert _snapshot_publishers(result) == [
        (f"serviceAccount:{BRIDGE_ACCOUNT}", "roles/pubsub.publisher"),
        (f"serviceAccount:{other}", "roles/pubsub.publisher"),
    ]
    assert _drain_notice_readers(result) == [
        (f"serviceAccount:{BRIDGE_ACCOUNT}", "roles/pubsub.subscriber"),
        (f"serviceAccount:{other}", "roles/pubsub.subscriber"),
    ]
    # No other binding names the bridge: not the dead letters, not the functions, no project
    # role, not the drain-notice topic (the functions publish there).
    mentions = [c for c in result.commands if any(BRIDGE_ACCOUNT in word for word in c)]
    assert len(mentions) == 2
    assert "no --bridge-service-account" not in result.stdout


def test_the_bridge_account_may_come_from_the_environment(tmp_path: Path) -> None:
    marker = tmp_path / "gcloud-was-called"
    env = script_env(
        tmp_path,
        FAILING_GCLOUD.format(marker=marker),
        DYNAGENT_BRIDGE_SERVICE_ACCOUNT=BRIDGE_ACCOUNT,
    )
    result = deploy(env, "--project", PROJECT, "--region", REGION, "--config", str(EXAMPLE))
    assert result.returncode == 0, result.stderr
    assert _snapshot_publishers(result) == [
        (f"serviceAccount:{BRIDGE_ACCOUNT}", "roles/pubsub.publisher")
    ]


def test_a_bad_bridge_account_is_refused(tmp_path: Path) -> None:
    result = dry_run(tmp_path, "--bridge-service-account", "not an email")
    assert result.returncode == 2
    assert "--bridge-service-account not an email is not a service account" in result.stderr


def test_the_dry_run_says_how_a_master_publishes_and_the_bridge_reads_notices(
    printed: Run,
) -> None:
    assert f"projects/{PROJECT}/topics/dynagent-snapshots" in printed.stdout
    assert "ordering key" in printed.stdout
    subscription = f"projects/{PROJECT}/subscriptions/dynagent-drain-notices"
    assert f"the bridge reads drain notices with --drain-notices {subscription}" in printed.stdout
    assert printed.stdout.rstrip().endswith("# dry run: nothing was run")


def test_the_staged_source_is_the_functions_package_and_config(printed: Run) -> None:
    source = printed.source
    assert (source / "main.py").read_text() == (ROOT / "functions/gcp/main.py").read_text()
    assert (source / "requirements.txt").read_text() == (INFRA / "requirements.txt").read_text()
    assert (source / "dynagent.yaml").read_text() == EXAMPLE.read_text()
    assert (source / "dynagent" / "core" / "config.py").is_file()
    assert not list(source.rglob("__pycache__"))
    # main.py imports, with dynagent from the staged copy, and the config loads.
    probe = (
        "import sys; sys.path.insert(0, '.')\n"
        "import main, dynagent\n"
        "from dynagent.files.config import load_config\n"
        "assert callable(main.reconcile) and callable(main.sweep)\n"
        "assert dynagent.__file__.startswith(sys.argv[1]), dynagent.__file__\n"
        "print(sorted(load_config('dynagent.yaml').pools))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(source)],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['gpu', 'gpu-spot']"


def test_the_printed_commands_run_as_a_shell_script(printed: Run, tmp_path: Path) -> None:
    """Copy-pasteable: a shell running the output passes each command the words intended."""
    log = tmp_path / "calls.jsonl"
    env = script_env(tmp_path / "paste", _recording_gcloud(), FAKE_GCLOUD_LOG=str(log))
    done = subprocess.run(["bash", "-eu"], input=printed.stdout, env=env, text=True, timeout=60)
    assert done.returncode == 0
    values = {
        "${TRIGGER}": FAKE_TRIGGER,
        "${SUBSCRIPTION}": FAKE_SUBSCRIPTION,
        "${PROJECT_NUMBER}": FAKE_PROJECT_NUMBER,
    }
    expected = []
    for line in printed.stdout.splitlines():
        capture = re.fullmatch(r"[A-Z_]+=\$\((gcloud .*)\)", line)
        command = capture.group(1) if capture else line
        if command.startswith("gcloud "):
            expected.append([_substitute(word, values) for word in shlex.split(command)[1:]])
    assert len(expected) > 20
    assert _calls(log) == expected


@pytest.mark.parametrize(
    "word",
    [
        "plain-word_1.2:3@x",
        "* * * * *",
        '{"type": "sweep"}',
        "it's",
        "--description=it's a (test)",
        "$HOME and `date`",
        "back\\slash",
        "",
    ],
)
def test_each_word_is_quoted_so_a_shell_reads_it_back(word: str) -> None:
    probe = 'source "$1"; q=$(quote "$2"); eval "back=$q"; printf "%s\\n%s" "$q" "$back"'
    done = subprocess.run(
        ["bash", "-c", probe, "probe", str(SCRIPT), word],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    quoted, back = done.stdout.split("\n", 1)
    assert back == word
    assert shlex.split(quoted) == ([word] if word else [""])


def _substitute(word: str, values: dict[str, str]) -> str:
    for placeholder, value in values.items():
        word = word.replace(placeholder, value)
    return word


# --------------------------------------------------------------------------------------
# What the config decides
# --------------------------------------------------------------------------------------


def test_permissions_and_grants_follow_the_pools(tmp_path: Path) -> None:
    bare = write_config(tmp_path / "bare.yaml", gcp_pool("plain"))
    result = dry_run(tmp_path, config=bare)
    assert result.returncode == 0, result.stderr
    role = compute_role(result)
    assert set(flags(role)["permissions"].split(",")) == BASE_PERMISSIONS
    assert not result.find("iam", "service-accounts", "add-iam-policy-binding")

    exposed = write_config(
        tmp_path / "exposed.yaml", gcp_pool("open", network_interface={"external_ip": True})
    )
    result = dry_run(tmp_path, config=exposed)
    role = compute_role(result)
    assert "compute.subnetworks.useExternalIp" in flags(role)["permissions"].split(",")

    reserving = write_config(
        tmp_path / "reserving.yaml", gcp_pool("a3", reservations=["a3-reserved"])
    )
    result = dry_run(tmp_path, config=reserving)
    permissions = set(flags(compute_role(result))["permissions"].split(","))
    assert permissions == BASE_PERMISSIONS | {"compute.reservations.get"}


def test_a_pool_in_another_project_gets_the_role_and_condition_there(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "two.yaml",
        gcp_pool("here"),
        gcp_pool("there", project="other-gpu-project", zone="europe-west4-a", name_prefix="eu-"),
    )
    result = dry_run(tmp_path, config=config)
    assert result.returncode == 0, result.stderr
    roles = {flags(c)["project"] for c in result.find("iam", "roles", "create")}
    assert roles == {PROJECT, "other-gpu-project"}
    [there] = [c for c in result.find("projects", "add-iam-policy-binding") if c[3] != PROJECT]
    assert flags(there)["role"] == "projects/other-gpu-project/roles/dynagent_compute"
    expression = json.loads(Path(flags(there)["condition-from-file"]).read_text())["expression"]
    assert "projects/other-gpu-project/zones/europe-west4-a/instances/eu-" in expression
    assert PROJECT + "/" not in expression  # only that project's pools
    enabled = [c for c in result.find("services", "enable") if flags(c)["project"] != PROJECT]
    assert [set(c[3:-1]) for c in enabled] == [{"compute.googleapis.com", "iam.googleapis.com"}]


def test_name_prefixes_every_resource(tmp_path: Path) -> None:
    result = dry_run(tmp_path, "--name", "gpu-prod")
    assert result.returncode == 0, result.stderr
    assert [c[4] for c in result.find("pubsub", "topics", "create")] == [
        "gpu-prod-snapshots",
        "gpu-prod-sweep",
        "gpu-prod-dead-letters",
        "gpu-prod-drain-notices",
    ]
    assert [c[4] for c in result.find("pubsub", "subscriptions", "create")] == [
        "gpu-prod-dead-letters",
        "gpu-prod-drain-notices",
    ]
    assert {c[3] for c in result.find("functions", "deploy")} == {
        "gpu-prod-reconcile",
        "gpu-prod-sweep",
    }
    assert compute_role(result)[4] == "gpu_prod_compute"
    assert f"gpu-prod-fn@{PROJECT}.iam.gserviceaccount.com" in result.stdout


# --------------------------------------------------------------------------------------
# Refusals: clear messages, nothing printed to run
# --------------------------------------------------------------------------------------


def test_a_bad_config_fails_with_the_loaders_message(tmp_path: Path) -> None:
    bad = write_config(tmp_path / "bad.yaml", gcp_pool("t4", zone="nowhere"))
    result = dry_run(tmp_path, config=bad)
    assert result.returncode == 2
    assert "pool 't4'" in result.stderr and "provider.zone" in result.stderr
    assert "cannot be deployed" in result.stderr
    assert result.commands == []


def test_a_config_without_gcp_pools_is_refused(tmp_path: Path) -> None:
    result = dry_run(tmp_path, config=AWS_EXAMPLE)
    assert result.returncode == 2
    assert "no GCP pool to deploy here; AWS pools gpu, gpu-spot are left to `make sam`" in (
        result.stderr
    )


def test_a_config_of_both_clouds_plans_only_its_gcp_pools(tmp_path: Path) -> None:
    """The file `make sam` packs too: its AWS pools are named and left out."""
    aws_pools = yaml.safe_load(AWS_EXAMPLE.read_text())["resource_pools"]
    both = write_config(tmp_path / "pools.yaml", *aws_pools, gcp_pool("t4"))
    result = dry_run(tmp_path, config=both)
    assert result.returncode == 0, result.stderr
    assert "# pool gpu: an AWS pool, left to `make sam`" in result.stdout
    assert "# pool gpu-spot: an AWS pool, left to `make sam`" in result.stdout
    assert "# pool t4: my-gpu-project/us-central1-a" in result.stdout
    words = [word.replace(PROJECT, "") for command in result.commands for word in command]
    assert not [word for word in words if "gpu" in word]
    staged = yaml.safe_load((result.source / "dynagent.yaml").read_text())
    assert [pool["pool_name"] for pool in staged["resource_pools"]] == ["t4"]


def test_the_zone_guard_names_the_pool_outside_it(tmp_path: Path) -> None:
    result = dry_run(tmp_path, "--zone", "us-central1-a")
    assert result.returncode == 2
    assert "pool gpu-spot is in zone us-central1-b" in result.stderr
    assert dry_run(tmp_path, "--zone", "us-central1-a,us-central1-b").returncode == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--region", REGION, "--config", str(EXAMPLE)], "--project is required"),
        (["--project", PROJECT, "--config", str(EXAMPLE)], "--region is required"),
        (["--project", PROJECT, "--region", REGION], "--config is required"),
        (["--project", "Bad_Project", "--region", REGION, "--config", str(EXAMPLE)], "project"),
        (["--project", PROJECT, "--region", REGION, "--config", "/nonexistent.yaml"], "not found"),
        (["--bogus"], "unknown argument: --bogus"),
    ],
)
def test_missing_or_bad_inputs_are_refused(tmp_path: Path, args: list[str], message: str) -> None:
    marker = tmp_path / "gcloud-was-called"
    result = deploy(script_env(tmp_path, FAILING_GCLOUD.format(marker=marker)), *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert not marker.exists()


def test_inputs_may_come_from_the_environment(tmp_path: Path) -> None:
    marker = tmp_path / "gcloud-was-called"
    env = script_env(
        tmp_path,
        FAILING_GCLOUD.format(marker=marker),
        DYNAGENT_PROJECT=PROJECT,
        DYNAGENT_REGION=REGION,
        DYNAGENT_CONFIG_FILE=str(EXAMPLE),
        DYNAGENT_NAME="from-env",
    )
    result = deploy(env)
    assert result.returncode == 0, result.stderr
    assert result.one("iam", "service-accounts", "create")[4] == "from-env-fn"


# --------------------------------------------------------------------------------------
# Without --dry-run, against a recording fake gcloud
# --------------------------------------------------------------------------------------


def _recording_gcloud() -> str:
    return RECORDING_GCLOUD.format(
        python=sys.executable,
        trigger=FAKE_TRIGGER,
        subscription=FAKE_SUBSCRIPTION,
        number=FAKE_PROJECT_NUMBER,
        channel=FAKE_CHANNEL,
        found=FAKE_FOUND,
    )


def _calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def real_run(
    tmp_path: Path, *args: str, exists: bool, expression: str = "", role_deleted: bool = False
) -> list[list[str]]:
    tmp_path = tmp_path / "real"
    tmp_path.mkdir()
    log = tmp_path / "calls.jsonl"
    expression_file = tmp_path / "expression"
    expression_file.write_text(expression)
    env = script_env(
        tmp_path,
        _recording_gcloud(),
        FAKE_GCLOUD_LOG=str(log),
        FAKE_GCLOUD_EXISTS="1" if exists else "0",
        FAKE_GCLOUD_EXPRESSION=str(expression_file),
        FAKE_GCLOUD_ROLE_DELETED="1" if role_deleted else "0",
    )
    result = deploy(
        env, "--project", PROJECT, "--region", REGION, "--config", str(EXAMPLE), *args,
        dry_run=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert not list((tmp_path / "work").iterdir()), "the staging directory was left behind"
    return _calls(log)


LOOKUPS = ("describe", "get-iam-policy", "list")
# The staging directory a run makes (its name is random), wherever a word mentions it.
WORK_DIR = re.compile(r"[^\s=]*/dynagent-gcp-dynagent\.\w+")


def _changes(calls: list[list[str]]) -> list[list[str]]:
    """The calls that change something, with the temporary paths made comparable."""
    changes = []
    for call in calls:
        if any(word in LOOKUPS for word in call[1:4]):
            continue
        changes.append([WORK_DIR.sub("WORK", word) for word in call])
    return changes


def test_a_first_deployment_runs_what_the_dry_run_prints(printed: Run, tmp_path: Path) -> None:
    calls = real_run(tmp_path, exists=False)
    values = {
        "${TRIGGER}": FAKE_TRIGGER,
        "${SUBSCRIPTION}": FAKE_SUBSCRIPTION,
        "${PROJECT_NUMBER}": FAKE_PROJECT_NUMBER,
    }
    expected = [
        [WORK_DIR.sub("WORK", _substitute(word, values)) for word in command[1:]]
        for command in printed.commands
    ]
    assert _changes(calls) == expected
    # It looked before creating each topic, the subscription, the account and the role.
    described = [c[:3] for c in calls if "describe" in c[:4]]
    assert ["pubsub", "topics", "describe"] in described
    assert ["iam", "roles", "describe"] in described


def test_a_second_deployment_creates_nothing_and_updates_in_place(
    printed: Run, tmp_path: Path
) -> None:
    binding = printed.one("projects", "add-iam-policy-binding")
    condition = json.loads(Path(flags(binding)["condition-from-file"]).read_text())
    changes = _changes(real_run(tmp_path, exists=True, expression=condition["expression"]))

    verbs = {" ".join(call[:3]) for call in changes}
    assert not [call for call in changes if "create" in call[:4]], changes
    assert "iam roles update" in verbs
    assert "scheduler jobs update" in verbs
    assert "functions deploy dynagent-reconcile" in verbs  # a deploy always ships the code
    # The role binding already has this condition: it is neither removed nor re-added.
    assert not [c for c in changes if c[:2] == ["projects", "add-iam-policy-binding"]]
    assert not [c for c in changes if c[:2] == ["projects", "remove-iam-policy-binding"]]


def test_a_binding_with_a_stale_condition_is_replaced(tmp_path: Path) -> None:
    changes = _changes(real_run(tmp_path, exists=True, expression="resource.name == 'old'"))
    project_bindings = [c[:2] for c in changes if c[0] == "projects"]
    assert project_bindings == [
        ["projects", "remove-iam-policy-binding"],
        ["projects", "add-iam-policy-binding"],
    ]


# --------------------------------------------------------------------------------------
# Monitoring: log-based metrics of the CATALOG, alert policies, a dashboard
# --------------------------------------------------------------------------------------

USER_METRIC = re.compile(r"logging\.googleapis\.com/user/dynagent_(\w+)")
PROMQL_METRIC = re.compile(r"logging_googleapis_com:user_dynagent_(\w+?)_(?:sum|count)\b")
POLICIES = {
    "dynagent: dead letters": "pubsub.googleapis.com/subscription/num_undelivered_messages",
    "dynagent: function errors": "run.googleapis.com/request_count",
    "dynagent: no snapshots": "logging.googleapis.com/user/dynagent_SnapshotsApplied",
    "dynagent: launch errors": "logging.googleapis.com/user/dynagent_LaunchErrors",
    "dynagent: pending at max": "logging.googleapis.com/user/dynagent_PendingAtMax",
}


def _file(command: list[str], flag: str) -> Any:
    return json.loads(Path(flags(command)[flag]).read_text())


def test_a_log_based_metric_per_catalog_metric(printed: Run) -> None:
    from dynagent.report.metrics import CATALOG

    created = printed.find("logging", "metrics", "create")
    assert [c[4] for c in created] == [f"dynagent_{spec.name}" for spec in CATALOG]
    for spec, command in zip(CATALOG, created, strict=True):
        assert flags(command)["project"] == PROJECT
        config = _file(command, "config-from-file")
        assert config["name"] == command[4]
        # Only the functions' metric lines, and only this metric's.
        assert (
            'resource.labels.service_name=("dynagent-reconcile" OR "dynagent-sweep")'
            in (config["filter"])
        )
        assert config["filter"].endswith(
            f'jsonPayload.message="dynagent metric" AND jsonPayload.metric="{spec.name}"'
        )
        assert config["valueExtractor"] == "EXTRACT(jsonPayload.value)"
        assert config["labelExtractors"] == {
            d: f"EXTRACT(jsonPayload.{d})" for d in spec.dimensions
        }
        descriptor = config["metricDescriptor"]
        assert (descriptor["metricKind"], descriptor["valueType"]) == ("DELTA", "DISTRIBUTION")
        assert [label["key"] for label in descriptor["labels"]] == list(spec.dimensions)
        assert "bucketOptions" in config


def test_alert_policies_watch_catalog_metrics_and_gcp_signals(printed: Run) -> None:
    from dynagent.report.metrics import BY_NAME

    policies = {}
    for command in printed.find("alpha", "monitoring", "policies", "create"):
        assert flags(command)["project"] == PROJECT
        policy = _file(command, "policy-from-file")
        policies[policy["displayName"]] = policy
    assert set(policies) == set(POLICIES)
    for title, metric in POLICIES.items():
        (condition,) = policies[title]["conditions"]
        (body,) = (v for k, v in condition.items() if k.startswith("condition"))
        assert f'metric.type="{metric}"' in body["filter"]
        for name in USER_METRIC.findall(body["filter"]):
            assert name in BY_NAME
        assert policies[title]["notificationChannels"] == []  # no --alert-email
    dead = policies["dynagent: dead letters"]["conditions"][0]["conditionThreshold"]
    assert 'resource.labels.subscription_id="dynagent-dead-letters"' in dead["filter"]
    assert (dead["comparison"], dead["thresholdValue"]) == ("COMPARISON_GT", 0)
    errors = policies["dynagent: function errors"]["conditions"][0]["conditionThreshold"]
    assert 'metric.labels.response_code_class="5xx"' in errors["filter"]
    absent = policies["dynagent: no snapshots"]["conditions"][0]["conditionAbsent"]
    assert absent["duration"] == "600s"
    assert absent["aggregations"][0]["groupByFields"] == ["metric.label.pool"]
    for title, duration in (("launch errors", "900s"), ("pending at max", "1800s")):
        condition = policies[f"dynagent: {title}"]["conditions"][0]["conditionThreshold"]
        assert condition["duration"] == duration
        assert (condition["comparison"], condition["thresholdValue"]) == ("COMPARISON_GT", 0)
        assert condition["aggregations"][0]["perSeriesAligner"] == "ALIGN_MEAN"


def test_the_dashboard_charts_catalog_metrics(printed: Run) -> None:
    from dynagent.report.metrics import BY_NAME

    command = printed.one("monitoring", "dashboards", "create")
    dashboard = _file(command, "config-from-file")
    assert dashboard["displayName"].startswith("dynagent: ")
    queries = [
        data["timeSeriesQuery"]["prometheusQuery"]
        for tile in dashboard["mosaicLayout"]["tiles"]
        for data in tile["widget"]["xyChart"]["dataSets"]
    ]
    charted = {name for query in queries for name in PROMQL_METRIC.findall(query)}
    assert charted <= set(BY_NAME)
    assert {
        "Instances", "Agents", "PendingSlots", "CostPerHour", "Launches", "Terminations",
        "LaunchErrors", "SnapshotAge", "StoppedInstances", "StoppedDiskCost", "Stops",
        "Starts", "StartsRefused",
    } <= charted  # fmt: skip
    assert any("by (pool, reason)" in q and "Terminations" in q for q in queries)
    assert any("by (pool, code)" in q and "LaunchErrors" in q for q in queries)
    assert any("by (pool, instance_type)" in q and "StoppedInstances" in q for q in queries)
    assert any("by (pool, code)" in q and "StartsRefused" in q for q in queries)


def test_an_alert_email_gets_a_channel_that_every_policy_notifies(tmp_path: Path) -> None:
    result = dry_run(tmp_path, "--alert-email", "ops@example.com")
    assert result.returncode == 0, result.stderr
    channel = result.captures["CHANNEL"]
    assert channel[1:5] == ["beta", "monitoring", "channels", "create"]
    assert flags(channel)["channel-labels"] == "email_address=ops@example.com"
    assert flags(channel)["type"] == "email"
    for command in result.find("alpha", "monitoring", "policies", "create"):
        assert _file(command, "policy-from-file")["notificationChannels"] == ["${CHANNEL}"]
    assert "no --alert-email" not in result.stdout


def test_a_bad_alert_email_is_refused(tmp_path: Path) -> None:
    result = dry_run(tmp_path, "--alert-email", "not-an-address")
    assert result.returncode == 2
    assert "--alert-email not-an-address is not an email address" in result.stderr


def test_a_second_deployment_replaces_the_monitoring_in_place(tmp_path: Path) -> None:
    changes = _changes(real_run(tmp_path, "--alert-email", "ops@example.com", exists=True))
    monitoring = [c for c in changes if c[0] in ("logging", "alpha", "beta", "monitoring")]
    assert not [c for c in monitoring if "create" in c[:4]], monitoring
    from dynagent.report.metrics import CATALOG

    updated_metrics = [c for c in monitoring if c[:3] == ["logging", "metrics", "update"]]
    assert len(updated_metrics) == len(CATALOG)
    updated = [c for c in monitoring if c[:4] == ["alpha", "monitoring", "policies", "update"]]
    assert [c[4] for c in updated] == [FAKE_FOUND] * len(POLICIES)
    assert [c[:4] for c in monitoring if c[0] == "monitoring"] == [
        ["monitoring", "dashboards", "update", FAKE_FOUND]
    ]


def test_a_first_deployment_creates_the_channel_and_names_it(tmp_path: Path) -> None:
    calls = real_run(tmp_path, "--alert-email", "ops@example.com", exists=False)
    assert [c[:4] for c in calls if c[:2] == ["beta", "monitoring"]] == [
        ["beta", "monitoring", "channels", "list"],
        ["beta", "monitoring", "channels", "create"],
    ]
    assert len([c for c in calls if c[:4] == ["alpha", "monitoring", "policies", "create"]]) == 5


def test_the_monitoring_files_name_the_channel_given(tmp_path: Path) -> None:
    sys.path.insert(0, str(INFRA))
    try:
        import monitoring
    finally:
        sys.path.remove(str(INFRA))
    made = monitoring.write(tmp_path, "gpu-prod", FAKE_CHANNEL)
    for kind, _, path in made:
        if kind == "policy":
            assert json.loads(path.read_text())["notificationChannels"] == [FAKE_CHANNEL]
    names = [key for kind, key, _ in made if kind != "metric"]
    assert all(name.startswith("gpu-prod: ") for name in names)
    assert monitoring.promql_name("gpu-prod", "Agents") == (
        "logging_googleapis_com:user_gpu_prod_Agents"
    )


# --------------------------------------------------------------------------------------
# Lint, where shellcheck is installed
# --------------------------------------------------------------------------------------


def test_shellcheck_finds_nothing() -> None:
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")
    done = subprocess.run([shellcheck, str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout


def test_requirements_are_the_gcp_extra_and_the_core_dependencies() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = set(project["dependencies"]) | set(project["optional-dependencies"]["gcp"])
    lines = (INFRA / "requirements.txt").read_text().splitlines()
    assert {line for line in lines if line and not line.startswith("#")} == wanted


def test_a_pool_without_project_or_zone_takes_the_deployments(tmp_path: Path) -> None:
    # As Determined's master takes them from its metadata (det deploy gcp writes neither).
    pool = gcp_pool("t4")
    del pool["provider"]["project"], pool["provider"]["zone"]
    config = write_config(tmp_path / "bare.yaml", pool)

    result = dry_run(tmp_path, "--zone", "us-central1-a", config=config)

    assert result.returncode == 0, result.stderr
    [command, *_] = result.find("functions", "deploy")
    assert env_vars(command)["DYNAGENT_GCP_PROJECT"] == PROJECT
    assert env_vars(command)["DYNAGENT_GCP_ZONE"] == "us-central1-a"
    assert f"projects/{PROJECT}/zones/us-central1-a/instances/" in result.stdout


def test_a_pool_without_zone_needs_one_zone_given(tmp_path: Path) -> None:
    pool = gcp_pool("t4")
    del pool["provider"]["zone"]
    config = write_config(tmp_path / "bare.yaml", pool)

    result = dry_run(tmp_path, config=config)

    assert result.returncode != 0
    assert "provider.zone" in result.stderr and "DYNAGENT_GCP_ZONE" in result.stderr


# --------------------------------------------------------------------------------------
# --delete: what deploy.sh made for the name, and nothing else
# --------------------------------------------------------------------------------------

FAKE_CLOUD = Path(__file__).with_name("fake_gcloud.py")
MUTATIONS = ("create", "update", "deploy", "delete", "add-iam-policy-binding")
# bash's own error (deploy.sh: line 86: 2: ...), where deploy.sh's should be.
BASH_MESSAGE = re.compile(r"deploy\.sh: line \d+")


def _labels(value: str) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in value.split(",") if pair)


def deployed(run: Run) -> dict[str, list[dict[str, Any]]]:
    """What the commands of a create dry run leave in the project, as fake_gcloud keeps it:
    each resource with the labels, title or description those commands give it. Grants
    on topics and functions are left out: they go with their resource."""
    resources: list[dict[str, Any]] = []
    bindings: list[dict[str, str]] = []

    def add(kind: str, name: str, project: str, location: str = "", **fields: Any) -> None:
        resources.append(
            {"kind": kind, "name": name, "project": project, "location": location,
             "fields": fields}
        )  # fmt: skip

    for number, command in enumerate(run.commands):
        words, options = command[1:], flags(command)
        project = options.get("project", "")
        if words[:3] in (["pubsub", "topics", "create"], ["pubsub", "subscriptions", "create"]):
            add(" ".join(words[:2]), words[3], project, labels=_labels(options["labels"]))
        elif words[:2] == ["functions", "deploy"]:
            labels = {"deployment-tool": "cli-gcloud", **_labels(options["update-labels"])}
            add("functions", words[2], project, options["region"], labels=labels)
        elif words[:4] == ["scheduler", "jobs", "create", "pubsub"]:
            add("scheduler jobs", words[4], project, options["location"],
                description=options["description"])  # fmt: skip
        elif words[:3] == ["iam", "service-accounts", "create"]:
            email = f"{words[3]}@{project}.iam.gserviceaccount.com"
            add("iam service-accounts", email, project, displayName=options["display-name"])
        elif words[:3] == ["iam", "roles", "create"]:
            add("iam roles", words[3], project, title=options["title"])
        elif words[:3] == ["logging", "metrics", "create"]:
            metric = _file(command, "config-from-file")
            add("logging metrics", words[3], project, description=metric["description"])
        elif words[:4] == ["alpha", "monitoring", "policies", "create"]:
            policy = _file(command, "policy-from-file")
            add("monitoring policies", f"projects/{project}/alertPolicies/{number}", project,
                displayName=policy["displayName"], userLabels=policy.get("userLabels", {}),
            )  # fmt: skip
        elif words[:3] == ["monitoring", "dashboards", "create"]:
            board = _file(command, "config-from-file")
            add("monitoring dashboards", f"projects/{project}/dashboards/{number}", project,
                displayName=board["displayName"], labels=board.get("labels", {}))  # fmt: skip
        elif words[:2] == ["projects", "add-iam-policy-binding"] or words[:3] == [
            "iam", "service-accounts", "add-iam-policy-binding",
        ]:  # fmt: skip
            kind = " ".join(words[: words.index("add-iam-policy-binding")])
            resource = words[words.index("add-iam-policy-binding") + 1]
            bindings.append(
                {"kind": kind, "resource": resource, "role": options["role"],
                 "member": options["member"]}
            )  # fmt: skip
    return {"resources": resources, "bindings": bindings}


def _merged(*states: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    return {
        key: [item for state in states for item in state[key]] for key in ("resources", "bindings")
    }


def _identities(state: dict[str, list[dict[str, Any]]]) -> set[tuple[str, ...]]:
    """Each resource and grant, as a delete names it."""
    return {("delete", r["kind"], r["name"], r["project"]) for r in state["resources"]} | {
        ("ungrant", b["kind"], b["resource"], b["role"], b["member"]) for b in state["bindings"]
    }


def _deleted(run: Run) -> list[tuple[str, ...]]:
    """What the printed commands delete, in the same terms as _identities."""
    from . import fake_gcloud

    deleted = []
    for command in run.commands:
        kind, verb, name, options = fake_gcloud.parse(command[1:])
        if verb == "delete":
            deleted.append(("delete", kind, name, options.get("project", "")))
        elif verb == "remove-iam-policy-binding":
            deleted.append(("ungrant", kind, name, options["role"], options["member"]))
        else:
            raise AssertionError(f"a --delete printed a command that deletes nothing: {command}")
    return deleted


@dataclass
class Cloud:
    """A project as fake_gcloud keeps it, and the gcloud calls made on it."""

    path: Path
    log: Path
    env: dict[str, str]

    @property
    def state(self) -> dict[str, list[dict[str, Any]]]:
        return json.loads(self.path.read_text())

    def calls(self) -> list[list[str]]:
        return _calls(self.log)

    def delete(self, *args: str, dry_run: bool, config: Path | None = EXAMPLE) -> Run:
        base = ["--delete", "--project", PROJECT, "--region", REGION]
        if config is not None:
            base += ["--config", str(config)]
        result = deploy(self.env, *base, *args, dry_run=dry_run)
        assert not BASH_MESSAGE.search(result.stderr), result.stderr
        return result


def fake_cloud(tmp_path: Path, state: dict[str, list[dict[str, Any]]], **extra: str) -> Cloud:
    path, log = tmp_path / "cloud.json", tmp_path / "cloud-calls.jsonl"
    path.write_text(json.dumps(state, indent=1))
    gcloud = f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(FAKE_CLOUD))} "$@"\n'
    env = script_env(
        tmp_path / "cloud", gcloud, FAKE_GCLOUD_STATE=str(path), FAKE_GCLOUD_LOG=str(log), **extra
    )
    return Cloud(path, log, env)


def _mutations(calls: list[list[str]]) -> list[list[str]]:
    return [c for c in calls if any(word in MUTATIONS for word in c[:4])]


# Someone else's, in the same project: names of other prefixes, and a near miss of ours.
FOREIGN = {
    "resources": [
        {"kind": "pubsub topics", "name": "other-snapshots", "project": PROJECT,
         "fields": {"labels": {"dynagent-deployment": "other"}}},
        {"kind": "pubsub topics", "name": "dynagent-snapshots-old", "project": PROJECT,
         "fields": {"labels": {"dynagent-deployment": "dynagent"}}},
        {"kind": "functions", "name": "dynagent-reconcile", "project": "another-project",
         "location": REGION, "fields": {"labels": {"dynagent-deployment": "dynagent"}}},
        {"kind": "monitoring policies", "name": f"projects/{PROJECT}/alertPolicies/x",
         "project": PROJECT,
         "fields": {"displayName": "dynagent: dead letters (copy)",
                    "userLabels": {"dynagent-deployment": "dynagent"}}},
    ],
    "bindings": [
        {"kind": "projects", "resource": PROJECT,
         "role": f"projects/{PROJECT}/roles/dynagent_compute",
         "member": f"serviceAccount:someone@{PROJECT}.iam.gserviceaccount.com"},
    ],
}  # fmt: skip


def two_projects(tmp_path: Path) -> Path:
    return write_config(
        tmp_path / "two.yaml",
        gcp_pool("here", service_account={"email": AGENT_ACCOUNT}),
        gcp_pool("there", project="other-gpu-project", zone="europe-west4-a", name_prefix="eu-"),
    )


@pytest.fixture(params=["example", "two-projects"])
def pools(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    return EXAMPLE if request.param == "example" else two_projects(tmp_path)


def _deployments(tmp_path: Path, config: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The state of `dynagent` and of `gpu-prod`, both deployed from ``config``."""
    ours = dry_run(tmp_path / "ours", config=config)
    theirs = dry_run(tmp_path / "theirs", "--name", "gpu-prod", config=config)
    assert ours.returncode == theirs.returncode == 0, ours.stderr + theirs.stderr
    return deployed(ours), deployed(theirs)


def test_a_delete_dry_run_prints_a_delete_for_each_thing_deployed_and_runs_none(
    tmp_path: Path, pools: Path
) -> None:
    ours, theirs = _deployments(tmp_path, pools)
    assert len(_identities(ours)) > 20  # topics, functions, roles, grants, monitoring...
    cloud = fake_cloud(tmp_path, _merged(ours, theirs, FOREIGN))
    before = cloud.path.read_text()

    result = cloud.delete("--config", str(pools), dry_run=True, config=None)

    assert result.returncode == 0, result.stderr
    deleted = _deleted(result)
    assert sorted(deleted) == sorted(_identities(ours))  # each once, and nothing else
    foreign = ["gpu-prod", "other-snapshots", "-old", "alertPolicies/x", "another-project"]
    assert not [w for c in result.commands for w in c if any(f in w for f in foreign)]
    # It looked (describe, list, get-iam-policy), and changed nothing.
    assert cloud.calls() and not _mutations(cloud.calls())
    assert cloud.path.read_text() == before
    assert result.stdout.rstrip().endswith(
        f"# dry run: {len(deleted)} to delete, nothing was deleted"
    )


def test_a_delete_removes_the_deployment_and_a_second_finds_nothing_left(tmp_path: Path) -> None:
    ours, theirs = _deployments(tmp_path, EXAMPLE)
    cloud = fake_cloud(tmp_path, _merged(ours, theirs, FOREIGN))

    first = cloud.delete(dry_run=False)

    assert first.returncode == 0, first.stderr
    assert cloud.state == _merged(theirs, FOREIGN)
    assert (
        f"# deleted {len(_identities(ours))} resources and grants of dynagent 'dynagent'"
        in first.stdout
    )
    assert "+ gcloud pubsub topics delete dynagent-sweep" in first.stderr  # each command shown
    calls_before = len(cloud.calls())

    second = cloud.delete(dry_run=False)

    assert second.returncode == 0, second.stderr
    assert "# nothing of dynagent 'dynagent' was left to delete" in second.stdout
    assert not _mutations(cloud.calls()[calls_before:])
    assert cloud.state == _merged(theirs, FOREIGN)


def _unmark(state: dict[str, Any], kind: str, name: str, **fields: Any) -> None:
    [resource] = [r for r in state["resources"] if (r["kind"], r["name"]) == (kind, name)]
    resource["fields"].update(fields)


def test_what_has_our_name_but_not_our_mark_is_left_and_named(tmp_path: Path) -> None:
    ours, _ = _deployments(tmp_path, EXAMPLE)
    # As someone else (or a deploy.sh before labels) might have made them.
    _unmark(ours, "pubsub topics", "dynagent-sweep", labels={})
    _unmark(ours, "functions", "dynagent-reconcile", labels={"dynagent-deployment": "gpu-prod"})
    _unmark(ours, "scheduler jobs", "dynagent-sweep", description="the team's own sweep")
    _unmark(ours, "iam service-accounts", FN_ACCOUNT, displayName="not dynagent's")
    [policy] = [
        r for r in ours["resources"] if r["fields"].get("displayName") == "dynagent: no snapshots"
    ]
    policy["fields"]["userLabels"] = {}
    cloud = fake_cloud(tmp_path, ours)

    result = cloud.delete(dry_run=False)

    assert result.returncode == 0, result.stderr
    left = {(r["kind"], r["name"]) for r in cloud.state["resources"]}
    assert left == {
        ("pubsub topics", "dynagent-sweep"),
        ("functions", "dynagent-reconcile"),
        ("scheduler jobs", "dynagent-sweep"),
        ("iam service-accounts", FN_ACCOUNT),
        ("monitoring policies", policy["name"]),
    }
    # An account not known for ours keeps its grants.
    assert cloud.state["bindings"] == ours["bindings"]
    notes = [line for line in result.stdout.splitlines() if line.startswith("# left, not marked")]
    assert len(notes) == 5
    assert any("topic dynagent-sweep: no label dynagent-deployment=dynagent" in n for n in notes)
    assert any("job dynagent-sweep: its description is not" in n for n in notes)
    assert any(f"{FN_ACCOUNT}: its display name is not" in n for n in notes)


def test_a_delete_never_touches_the_pools_vms_and_says_how_to_remove_them(
    tmp_path: Path,
) -> None:
    ours, _ = _deployments(tmp_path, EXAMPLE)
    cloud = fake_cloud(tmp_path, ours)

    result = cloud.delete(dry_run=False)

    assert result.returncode == 0, result.stderr
    assert not [c for c in cloud.calls() if c[0] == "compute"]
    for pool in ("gpu", "gpu-spot"):
        [note] = [line for line in result.stdout.splitlines() if f"pool {pool}'s instances" in line]
        assert "--delete never deletes VMs" in note and "drain" in note
        assert (
            f"gcloud compute instances list --project={PROJECT} "
            f"--filter='labels.managed-by=dynagent AND labels.dynagent-pool={pool}'"
        ) in note


def test_an_alert_channel_is_left_with_how_to_remove_it(tmp_path: Path) -> None:
    channel = f"projects/{PROJECT}/notificationChannels/7"
    state = {
        "resources": [
            {"kind": "monitoring channels", "name": channel, "project": PROJECT,
             "fields": {"displayName": "dynagent alerts (ops@example.com)"}},
            {"kind": "monitoring channels", "name": f"{channel}0", "project": PROJECT,
             "fields": {"displayName": "gpu-prod alerts (ops@example.com)"}},
        ],
        "bindings": [],
    }  # fmt: skip
    cloud = fake_cloud(tmp_path, state)

    result = cloud.delete(dry_run=False)

    assert result.returncode == 0, result.stderr
    assert cloud.state == state
    [note] = [line for line in result.stdout.splitlines() if "notification channel" in line]
    assert f"gcloud beta monitoring channels delete {channel} --project={PROJECT}" in note
    assert "# nothing of dynagent 'dynagent' was left to delete" in result.stdout


def test_without_a_config_the_deployments_project_is_searched_and_that_is_said(
    tmp_path: Path,
) -> None:
    ours, _ = _deployments(tmp_path, EXAMPLE)
    cloud = fake_cloud(tmp_path, ours)

    result = cloud.delete(dry_run=False, config=None)

    assert result.returncode == 0, result.stderr
    assert cloud.state["resources"] == []
    # The functions' actAs grant on the pools' service account needs the config to find.
    assert [b["resource"] for b in cloud.state["bindings"]] == [AGENT_ACCOUNT]
    assert "without --config, only project my-gpu-project was searched" in result.stdout
    assert "labels.dynagent-pool:*" in result.stdout


def test_a_lookup_that_fails_is_not_taken_for_gone(tmp_path: Path) -> None:
    ours, _ = _deployments(tmp_path, EXAMPLE)
    cloud = fake_cloud(tmp_path, ours)
    denied = "#!/bin/sh\necho 'ERROR: (gcloud) PERMISSION_DENIED: no' >&2\nexit 1\n"
    _executable(Path(cloud.env["PATH"].split(os.pathsep)[0]) / "gcloud", denied)

    result = cloud.delete(dry_run=False)

    assert result.returncode == 2
    assert "PERMISSION_DENIED" in result.stderr
    assert "deploy.sh: could not look it up: gcloud scheduler jobs describe" in result.stderr
    assert cloud.state == ours


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--region", REGION], "--project is required: the project of the deployment's"),
        (["--project", PROJECT], "--region is required: the region of the functions"),
        (["--project"], "--project needs a value"),
        (["--project", PROJECT, "--region", "--name", "x"], "--region needs a value"),
        (["--project", PROJECT, "--region", REGION, "--name", "A"], "--name A: 3-27"),
        (["--project", PROJECT, "--region", REGION, "--alert-email", "a@b.c"],
         "--alert-email is for deploying, not for --delete"),
        (["--project", PROJECT, "--region", REGION, "--config", "/nonexistent.yaml"],
         "config file /nonexistent.yaml not found"),
        (["--project", PROJECT, "--region", REGION, "--purge"], "unknown argument: --purge"),
    ],
)  # fmt: skip
def test_bad_delete_inputs_are_refused_before_any_gcloud(
    tmp_path: Path, args: list[str], message: str
) -> None:
    marker = tmp_path / "gcloud-was-called"
    env = script_env(tmp_path, FAILING_GCLOUD.format(marker=marker))
    result = deploy(env, "--delete", *args, dry_run=False)
    assert result.returncode == 2
    assert message in result.stderr
    assert not BASH_MESSAGE.search(result.stderr)
    assert not marker.exists()


def test_what_carries_labels_is_labelled_with_the_deployments_name(tmp_path: Path) -> None:
    result = dry_run(tmp_path, "--name", "gpu-prod")
    assert result.returncode == 0, result.stderr
    label = "dynagent-deployment=gpu-prod"
    for command in result.find("pubsub", "topics", "create") + result.find(
        "pubsub", "subscriptions", "create"
    ):
        assert flags(command)["labels"] == label
    for command in result.find("functions", "deploy"):
        assert flags(command)["update-labels"] == label
    for command in result.find("alpha", "monitoring", "policies", "create"):
        assert _file(command, "policy-from-file")["userLabels"] == {
            "dynagent-deployment": "gpu-prod"
        }
    board = _file(result.one("monitoring", "dashboards", "create"), "config-from-file")
    assert board["labels"] == {"dynagent-deployment": "gpu-prod"}


def test_a_redeployment_labels_the_topics_an_older_deploy_made(tmp_path: Path) -> None:
    changes = _changes(real_run(tmp_path, exists=True))
    updated = [c for c in changes if c[:3] in (["pubsub", "topics", "update"],
                                               ["pubsub", "subscriptions", "update"])]  # fmt: skip
    labelled = {c[3] for c in updated if "--update-labels=dynagent-deployment=dynagent" in c}
    assert labelled == {
        "dynagent-snapshots",
        "dynagent-sweep",
        "dynagent-dead-letters",
        "dynagent-drain-notices",
    }
    subscriptions = [
        c[3] for c in updated if c[:2] == ["pubsub", "subscriptions"] and c[3] in labelled
    ]
    assert sorted(subscriptions) == ["dynagent-dead-letters", "dynagent-drain-notices"]


def test_a_redeployment_after_a_delete_brings_its_custom_roles_back(tmp_path: Path) -> None:
    calls = real_run(tmp_path, exists=True, role_deleted=True)
    roles = [c[:4] for c in calls if c[:2] == ["iam", "roles"] and c[2] != "describe"]
    assert roles == [
        ["iam", "roles", "undelete", "dynagent_compute"],
        ["iam", "roles", "update", "dynagent_compute"],
        ["iam", "roles", "undelete", "dynagent_status"],
        ["iam", "roles", "update", "dynagent_status"],
    ]


# --delete with the real gcloud against the real Pub/Sub emulator (the rest of the
# project, which the emulator does not serve, is fake_gcloud's, and empty).


def _emulated_gcloud_env(tmp_path: Path, emulator: Any) -> dict[str, str]:
    real = shutil.which("gcloud")
    assert real is not None
    (tmp_path / "gcloud-config").mkdir()
    token = tmp_path / "token"
    token.write_text("emulator-ignores-it\n")
    host = emulator.env()["PUBSUB_EMULATOR_HOST"]
    return {
        "FAKE_GCLOUD_PUBSUB": real,
        "CLOUDSDK_CONFIG": str(tmp_path / "gcloud-config"),
        "CLOUDSDK_API_ENDPOINT_OVERRIDES_PUBSUB": f"http://{host}/",
        "CLOUDSDK_AUTH_ACCESS_TOKEN_FILE": str(token),
        "CLOUDSDK_CORE_DISABLE_PROMPTS": "1",
    }


def test_delete_removes_the_topics_the_deploy_made_in_the_pubsub_emulator(
    tmp_path: Path, pubsub_emulator: Any
) -> None:
    import uuid

    suffix = uuid.uuid4().hex[:8]
    name, other = f"t{suffix}", f"u{suffix}"  # the emulator is the session's
    cloud = fake_cloud(tmp_path, {"resources": [], "bindings": []},
                       **_emulated_gcloud_env(tmp_path, pubsub_emulator))  # fmt: skip

    def gcloud(*args: str) -> None:
        done = subprocess.run(["gcloud", *args], env=cloud.env, capture_output=True,
                              text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr

    # name's topics and subscriptions, made by the deploy's own gcloud commands, but for
    # its sweep topic: made without the label, as someone else would have. The other
    # deployment's, the same through the emulator's client (a gcloud call costs seconds).
    created = dry_run(tmp_path / name, "--name", name)
    assert created.returncode == 0, created.stderr
    for command in created.find("pubsub", "topics", "create") + created.find(
        "pubsub", "subscriptions", "create"
    ):
        if command[4] == f"{name}-sweep":
            command = [word for word in command if not word.startswith("--labels=")]
        gcloud(*command[1:])
    theirs_labels = {"dynagent-deployment": other}
    topics = f"projects/{PROJECT}/topics/{other}"
    for topic in ("snapshots", "sweep", "dead-letters"):
        pubsub_emulator.publisher().create_topic(
            request={"name": f"{topics}-{topic}", "labels": theirs_labels}
        )
    pubsub_emulator.subscriber().create_subscription(
        request={
            "name": f"projects/{PROJECT}/subscriptions/{other}-dead-letters",
            "topic": f"{topics}-dead-letters",
            "labels": theirs_labels,
        }
    )

    def names() -> set[str]:
        topics = pubsub_emulator.publisher().list_topics(project=f"projects/{PROJECT}")
        subscriptions = pubsub_emulator.subscriber().list_subscriptions(
            project=f"projects/{PROJECT}"
        )
        found = {t.name.rsplit("/", 1)[1] for t in topics}
        found |= {"sub:" + s.name.rsplit("/", 1)[1] for s in subscriptions}
        return {n for n in found if n.removeprefix("sub:").startswith((name, other))}

    theirs = {f"{other}-snapshots", f"{other}-sweep", f"{other}-dead-letters",
              f"sub:{other}-dead-letters"}  # fmt: skip
    ours = {f"{name}-snapshots", f"{name}-dead-letters", f"sub:{name}-dead-letters",
            f"{name}-drain-notices", f"sub:{name}-drain-notices"}  # fmt: skip
    assert names() == ours | theirs | {f"{name}-sweep"}

    printed = cloud.delete("--name", name, dry_run=True)
    assert printed.returncode == 0, printed.stderr
    assert sorted(" ".join(c[1:5]) for c in printed.commands) == sorted([
        f"pubsub subscriptions delete {name}-dead-letters",
        f"pubsub subscriptions delete {name}-drain-notices",
        f"pubsub topics delete {name}-snapshots",
        f"pubsub topics delete {name}-dead-letters",
        f"pubsub topics delete {name}-drain-notices",
    ])  # fmt: skip
    assert names() == ours | theirs | {f"{name}-sweep"}  # a dry run deletes nothing

    first = cloud.delete("--name", name, dry_run=False)
    assert first.returncode == 0, first.stderr
    assert names() == theirs | {f"{name}-sweep"}
    assert f"Pub/Sub topic {name}-sweep: no label dynagent-deployment={name}" in first.stdout
    assert f"# deleted 5 resources and grants of dynagent '{name}'" in first.stdout

    second = cloud.delete("--name", name, dry_run=False)
    assert second.returncode == 0, second.stderr
    assert f"# nothing of dynagent '{name}' was left to delete" in second.stdout
    assert names() == theirs | {f"{name}-sweep"}
