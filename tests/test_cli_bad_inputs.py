"""Every ``dynagent`` subcommand, given bad input: a short message, never a traceback.

Each row runs the real command line, in this process through ``dynagent.cli.main.main`` or,
where the row is about credentials or endpoints the SDKs resolve once per process, in a
subprocess with an environment that has none. It must exit non-zero, print no
traceback, and name what was wrong (the file, field, pool, queue, topic or endpoint) in
at most two lines. The local AWS (moto), the local Compute and Pub/Sub topics, and the
Pub/Sub emulator (where it is installed; see tests/gcp/emulators.py) stand in for the
clouds where a row needs one to answer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from dynagent.aws import clients as aws_clients
from dynagent.cli import main as cli
from dynagent.gcp import clients as gcp_clients
from dynagent.gcp.status import PUBSUB_ENDPOINT_ENV
from dynagent.testing.gcp.functions_server import free_port

if TYPE_CHECKING:
    from dynagent.testing.aws.local_aws import LocalAws
    from dynagent.testing.gcp.compute import LocalCompute
    from dynagent.testing.gcp.pubsub_topics import LocalPubSubTopics

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "dynagent-local"

AWS_POOL = {
    "pool_name": "gpu",
    "provider": {
        "type": "aws",
        "region": "us-west-2",
        "image_id": "ami-0123456789abcdef0",
        "instance_type": "g5.2xlarge",
        "max_instances": 2,
        "master_url": "http://10.0.0.5:8080",
    },
}
GCP_POOL = {
    "pool_name": "t4",
    "provider": {
        "type": "gcp",
        "project": PROJECT,
        "zone": "us-central1-a",
        "boot_disk_source_image": f"projects/{PROJECT}/global/images/agent",
        "instance_type": {
            "machine_type": "n1-standard-8",
            "gpu_type": "nvidia-tesla-t4",
            "gpu_num": 1,
        },
        "max_instances": 2,
        "master_url": "http://10.128.0.2:8080",
    },
}


@dataclass(frozen=True)
class Row:
    """One command line, and the words its message must hold."""

    argv: tuple[str, ...]
    says: tuple[str, ...]
    # "": no cloud; "aws": the local AWS; "gcp": the local Compute and topics;
    # "pubsub": the Pub/Sub emulator (skipped where it is not installed);
    # "nowhere": credentials, and an AWS endpoint nothing listens on; "determined": the
    # local Determined master, logged in to as admin with a wrong password.
    cloud: str = ""


def row(command: str, *says: str, cloud: str = "") -> Row:
    return Row(tuple(command.split()), says, cloud)


# {name} is a file of ``inputs`` (or a URL of the local clouds); see ``fill``.
ROWS = {
    "no command": row("", "required: COMMAND"),
    "unknown command": row("launch", "invalid choice: 'launch'"),
    "validate: no file": row("validate {missing}", "{missing}", "No such file"),
    "validate: not YAML": row("validate {not_yaml}", "{not_yaml}", "not valid YAML"),
    "validate: a key given twice": row(
        "validate {twice}", "{twice}", "line 7", "'instance_type' is given twice (first on line 6)"
    ),
    "validate: a tab": row("validate {tab}", "{tab}", "line 2, column 1", "'\\t'"),
    "validate: a bad field": row(
        "validate {bad_field}", "{bad_field}", "pool 'gpu'", "provider.max_instances"
    ),
    "validate: a misspelt field": row(
        "validate {misspelt}", "provider.max_instanecs: unknown field: did you mean max_instances?"
    ),
    "validate: a field one level off": row(
        "validate {one_level_off}",
        "provider.subnet_id: unknown field: it lives at provider.network_interface.subnet_id",
    ),
    "validate: a provider field at the pool's level": row(
        "validate {pool_level}", "max_instances (it lives at provider.max_instances)"
    ),
    "validate: a reservation that is no id": row(
        "validate {bad_reservation}", "provider.reservations", "'cr-12'", "tag:KEY=VALUE"
    ),
    "validate: a GCP reservation that is no name": row(
        "validate {bad_gcp_reservation}", "provider.reservations", "'R_1'", "projects/PROJECT"
    ),
    "validate: a duration longer than Go's": row(
        "validate {endless}", "{endless}", "provider.max_idle_agent_period", "2562047h"
    ),
    "validate: a drift budget of none": row(
        "validate {no_budget}", "provider.drift_budget", "'0%'", "like 10%"
    ),
    "validate: no argument": row("validate", "one of the arguments config --config is required"),
    "validate --config: a bad field": row(
        "validate --config {bad_field}", "{bad_field}", "pool 'gpu'", "provider.max_instances"
    ),
    "validate: a file that is not text": row(
        "validate {not_text}", "{not_text}", "not a text file", "give the pools file"
    ),
    "status: a file that is not text": row("status --config {not_text}", "{not_text}", "not UTF-8"),
    "master-config: no config": row(
        "master-config", "one of the arguments config --config is required"
    ),
    "master-config: max_instances 0": row(
        "master-config --config {zero_max}", "pool 'gpu'", "max_instances is 0"
    ),
    "publish: no file": row("publish {missing} --to {queue}", "{missing}", "No such file"),
    "publish: a snapshot without seq": row(
        "publish {no_seq} --to {queue}", "{no_seq}", "seq: Field required"
    ),
    "publish: a destination of no cloud": row(
        "publish {snapshot} --to ftp://host/q", "'ftp://host/q'", "neither an SQS queue URL"
    ),
    "publish: a queue that does not exist": row(
        "publish {snapshot} --to {queue}", "queue {queue}", "no such queue", cloud="aws"
    ),
    "publish: a topic that does not exist": row(
        "publish {snapshot} --to {topic}",
        "topic {topic}",
        "does not exist",
        "check its name and project",
        cloud="pubsub",
    ),
    "plan: a --snapshot that does not exist": row(
        "plan --config {aws} --snapshot {missing}", "{missing}", "No such file"
    ),
    "plan: a --snapshot without seq": row(
        "plan --config {aws} --snapshot {no_seq}", "{no_seq}", "seq: Field required"
    ),
    "plan: a snapshot of absurd slots": row(
        "plan --config {aws} --snapshot {absurd}",
        "{absurd}",
        "pending.0.slots: 1000000000000000000000000000000 is more slots than Determined's API",
    ),
    "plan: several pools, no --pool": row("plan --config {mixed}", "--pool is required", "gpu, t4"),
    "plan: a snapshot of a pool not configured": row(
        "plan --config {mixed} --snapshot {a100_snapshot}",
        "the snapshot's pool 'a100' is not configured (configured: gpu, t4)",
        "give --pool",
    ),
    "plan: an unknown pool": row(
        "plan --config {aws} --pool a100", "pool 'a100' is not configured", "gpu"
    ),
    "demo: an unknown cloud": row("demo --cloud azure", "--cloud", "invalid choice: 'azure'"),
    "status: no config file": row("status --config {missing}", "{missing}", "No such file"),
    "status: an unknown pool": row("status --config {aws} --pool a100", "pool 'a100'"),
    "status: a cloud without pools": row("status --config {aws} --cloud gcp", "no gcp pool"),
    "status: a queue that does not exist": row(
        "status --config {aws} --queue {queue}",
        "pool gpu (aws) skipped",
        "queue {queue}",
        "no such queue",
        cloud="aws",
    ),
    "status: a topic that does not exist": row(
        "status --config {gcp} --topic {topic}",
        "pool t4 (gcp) skipped",
        "topic {topic}",
        "does not exist",
        cloud="gcp",
    ),
    "status: Compute out of reach": row(
        "status --config {gcp}", "pool t4 (gcp) skipped", "cannot reach 127.0.0.1:{closed}"
    ),
    "simulate: no trace": row("simulate {missing}", "{missing}", "No such file"),
    "simulate: a trace of unknown columns": row(
        "simulate {bad_trace}", "{bad_trace}", "unknown columns"
    ),
    "simulate: a misspelt sweep field": row(
        "simulate {trace} --config {aws} --sweep max_instancs=1,2",
        "'max_instancs' is not a field of the pool's provider: did you mean max_instances?",
    ),
    "validate: a warm pool of no machines kept for no time": row(
        "validate {warm_no_period}", "provider.warm_pool.max_stopped_period", "greater than 0"
    ),
    "validate: a warm pool of a negative size": row(
        "validate {warm_negative}", "provider.warm_pool.max_stopped", "below 0", "or auto"
    ),
    "simulate: a sweep of a section": row(
        "simulate {trace} --config {warm} --sweep warm_pool=1,2",
        "'warm_pool' is a section; name one of its fields",
    ),
    "simulate: a misspelt nested sweep field": row(
        "simulate {trace} --config {warm} --sweep warm_pool.max_stoped=1,2",
        "not a field of warm_pool: did you mean max_stopped?",
    ),
    "simulate: a reservation written wrong": row(
        "simulate {trace} --config {aws} --reservation g5.2xlarge:10",
        "--reservation 'g5.2xlarge:10'",
        "like p4d.24xlarge=10",
    ),
    "simulate: a reservation of a type the pool does not buy": row(
        "simulate {trace} --config {aws} --reservation p4d.24xlarge=10",
        "--reservation of p4d.24xlarge",
        "pool 'gpu' does not buy that type (it buys g5.2xlarge)",
    ),
    "simulate: a boot longer than Go's durations": row(
        "simulate {trace} --registered-after 999999999999h", "--registered-after", "2562047h"
    ),
    "simulate: an outage longer than Go's durations": row(
        "simulate {trace} --config {aws} --unavailable g5.2xlarge=0h-999999999999h",
        "--unavailable",
        "2562047h",
    ),
    "simulate: no config file": row(
        "simulate {trace} --config {missing}", "{missing}", "No such file"
    ),
    "doctor: no config": row("doctor", "one of the arguments config --config is required"),
    "plan: the config twice": row(
        "plan {aws} --config {aws}", "argument --config: not allowed with argument config"
    ),
    "doctor: an unknown pool": row("doctor --config {aws} --pool a100", "pool 'a100'", "gpu"),
    "bridge: no master": row("bridge --config {aws} --print", "--master is required"),
    "bridge: no --to or --print": row(
        "bridge --master http://m:8080 --config {aws}", "one of the arguments --to --print"
    ),
    "bridge: a token file that does not exist": row(
        "bridge --master http://m:8080 --config {aws} --print --token-file {missing}",
        "{missing}",
        "No such file",
    ),
    "bridge: a master that does not answer": row(
        "bridge --master http://127.0.0.1:{closed} --config {aws} --print --once "
        "--token-file {token}",
        "the master at http://127.0.0.1:{closed} could not be read",
        "GET /api/v1/resource-pools",
        "check that --master (or DET_MASTER) is the master's URL",
    ),
    "bridge: drain notices from a topic, not its subscription": row(
        "bridge --master http://m:8080 --config {gcp} --print --token-file {token} "
        "--drain-notices projects/p/topics/dynagent-drain-notices",
        "--drain-notices 'projects/p/topics/dynagent-drain-notices'",
        "neither an SQS queue URL (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME)",
        "nor a Pub/Sub subscription (projects/PROJECT/subscriptions/NAME)",
    ),
    "trace: no master": row("trace --since 30d --out {trace_out}", "--master is required"),
    "trace: a --since before the year 1": row(
        "trace --master http://m:8080 --since 999999999999d --out {trace_out}",
        "--since '999999999999d' reaches back before the year 1",
    ),
    "trace: a bad --since": row(
        "trace --master http://m:8080 --since 30x --out {trace_out}",
        "--since '30x' is not a duration",
        "like 30d, 12h",
    ),
    "trace: a bad --until": row(
        "trace --master http://m:8080 --since 30d --until yesterday --out {trace_out}",
        "--until 'yesterday' is not a time",
    ),
    "trace: a master that does not answer": row(
        "trace --master http://127.0.0.1:{closed} --since 30d --out {trace_out} "
        "--token-file {token}",
        "the master at http://127.0.0.1:{closed} could not be read",
        "GET /resources/allocation/allocations-csv",
        "no trace written",
    ),
    "trace: a refused login": row(
        "trace --master {master} --since 30d --out {trace_out}",
        "the master at {master} could not be read",
        "login as 'admin' refused",
        "DET_USER and DET_PASS",
        cloud="determined",
    ),
}

# Rows about what the SDKs find in the environment: each in a process of its own.
NO_AWS_CREDENTIALS = "no AWS credentials found: set AWS_PROFILE"
NO_GOOGLE_CREDENTIALS = "no Google Cloud credentials found: run `gcloud auth"
ISOLATED_ROWS = {
    "plan: no AWS credentials": row("plan --config {aws}", "pool gpu", NO_AWS_CREDENTIALS),
    "status: no AWS credentials": row(
        "status --config {aws}", "pool gpu (aws) skipped", NO_AWS_CREDENTIALS
    ),
    "publish: no AWS credentials": row(
        "publish {snapshot} --to https://sqs.us-west-2.amazonaws.com/123456789012/s.fifo",
        "queue https://sqs.us-west-2.amazonaws.com/123456789012/s.fifo",
        NO_AWS_CREDENTIALS,
    ),
    "plan: no Google credentials": row(
        "plan --config {gcp}", "pool t4", "Compute Engine", NO_GOOGLE_CREDENTIALS
    ),
    "publish: no Google credentials": row(
        f"publish {{snapshot}} --to projects/{PROJECT}/topics/snapshots",
        f"topic projects/{PROJECT}/topics/snapshots",
        NO_GOOGLE_CREDENTIALS,
    ),
    "doctor: no AWS credentials": row(
        "doctor --config {mixed}", "pool gpu (aws) not checked", NO_AWS_CREDENTIALS
    ),
    "doctor: no Google credentials": row(
        "doctor --config {gcp}", "pool t4 (gcp) not checked", NO_GOOGLE_CREDENTIALS
    ),
    "doctor: AWS out of reach": row(
        "doctor --config {aws}",
        "pool gpu (aws) not checked",
        "cannot reach http://127.0.0.1:{closed}",
        cloud="nowhere",
    ),
    "plan: AWS out of reach": row(
        "plan --config {aws}", "pool gpu", "cannot reach http://127.0.0.1:{closed}", cloud="nowhere"
    ),
}


# --------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------


def snapshot_document(pool: str = "gpu") -> dict[str, Any]:
    now = datetime.now(UTC).isoformat()
    return {"type": "pool.snapshot", "version": 1, "pool": pool, "seq": 1, "time": now}


def write_yaml(path: Path, *pools: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump({"resource_pools": list(pools)}))
    return str(path)


def _text(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The files the rows name, good and bad, and a port nothing listens on."""
    folder = tmp_path_factory.mktemp("inputs")
    no_seq = {k: v for k, v in snapshot_document().items() if k != "seq"}
    absurd = {**snapshot_document(), "pending": [{"task": "huge", "slots": 10**30}]}
    bad_field = {**AWS_POOL, "provider": {**AWS_POOL["provider"], "max_instances": -1}}
    zero_max = {**AWS_POOL, "provider": {**AWS_POOL["provider"], "max_instances": 0}}
    bad_reservation = {**AWS_POOL, "provider": {**AWS_POOL["provider"], "reservations": ["cr-12"]}}
    bad_gcp_reservation = {
        **GCP_POOL,
        "provider": {**GCP_POOL["provider"], "reservations": ["R_1"]},
    }
    misspelt = {**AWS_POOL, "provider": {**AWS_POOL["provider"], "max_instanecs": 2}}
    one_level_off = {**AWS_POOL, "provider": {**AWS_POOL["provider"], "subnet_id": "subnet-1"}}
    pool_level = {**AWS_POOL, "max_instances": 2}
    endless = {
        **AWS_POOL,
        "provider": {**AWS_POOL["provider"], "max_idle_agent_period": "999999999999h"},
    }
    no_budget = {**AWS_POOL, "provider": {**AWS_POOL["provider"], "drift_budget": "0%"}}

    def warm(**fields: Any) -> dict[str, Any]:
        return {**AWS_POOL, "provider": {**AWS_POOL["provider"], "warm_pool": fields}}

    files = {
        "aws": write_yaml(folder / "aws.yaml", AWS_POOL),
        "gcp": write_yaml(folder / "gcp.yaml", GCP_POOL),
        "mixed": write_yaml(folder / "mixed.yaml", AWS_POOL, GCP_POOL),
        "bad_field": write_yaml(folder / "bad-field.yaml", bad_field),
        "zero_max": write_yaml(folder / "zero-max.yaml", zero_max),
        "bad_reservation": write_yaml(folder / "bad-reservation.yaml", bad_reservation),
        "bad_gcp_reservation": write_yaml(folder / "bad-gcp-reservation.yaml", bad_gcp_reservation),
        "misspelt": write_yaml(folder / "misspelt.yaml", misspelt),
        "one_level_off": write_yaml(folder / "one-level-off.yaml", one_level_off),
        "pool_level": write_yaml(folder / "pool-level.yaml", pool_level),
        "endless": write_yaml(folder / "endless.yaml", endless),
        "no_budget": write_yaml(folder / "no-budget.yaml", no_budget),
        "warm": write_yaml(folder / "warm.yaml", warm(max_stopped=2)),
        "warm_no_period": write_yaml(
            folder / "warm-no-period.yaml", warm(max_stopped=2, max_stopped_period="0s")
        ),
        "warm_negative": write_yaml(folder / "warm-negative.yaml", warm(max_stopped=-1)),
        "twice": _text(
            folder / "twice.yaml",
            "resource_pools:\n  - pool_name: gpu\n    provider:\n      type: aws\n"
            "      region: us-west-2\n      instance_type: g5.2xlarge\n"
            "      instance_type: g5.4xlarge\n",
        ),
        "tab": _text(folder / "tab.yaml", "resource_pools:\n\t- pool_name: gpu\n"),
        "missing": str(folder / "missing.yaml"),
        "trace_out": str(folder / "mine.csv"),
    }
    texts = {
        "not_yaml": ("not.yaml", "resource_pools: [\n"),
        "snapshot": ("snapshot.json", json.dumps(snapshot_document())),
        "a100_snapshot": ("a100.json", json.dumps(snapshot_document("a100"))),
        "absurd": ("absurd.json", json.dumps(absurd)),
        "no_seq": ("no-seq.json", json.dumps(no_seq)),
        "trace": ("trace.csv", "arrival_s,duration_s,gpus\n0,60,1\n"),
        "bad_trace": ("bad.csv", "when,what\n0,1\n"),
        "token": ("token", "an-access-token\n"),
    }
    for key, (name, text) in texts.items():
        (folder / name).write_text(text)
        files[key] = str(folder / name)
    # A binary given for the pools file: bytes that are no UTF-8.
    (folder / "pools.bin").write_bytes(bytes([0x7F, 0x45, 0x4C, 0xEE, 0x02, 0x01]))
    files["not_text"] = str(folder / "pools.bin")
    return {**files, "closed": str(free_port()), "topic": f"projects/{PROJECT}/topics/none"}


def fill(text: str, values: dict[str, str]) -> str:
    return text.format(**values) if "{" in text else text


# --------------------------------------------------------------------------------------
# The local clouds, for the rows that need one
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def local_gcp() -> Iterator[tuple[LocalCompute, LocalPubSubTopics]]:
    from dynagent.testing.gcp.compute import LocalCompute
    from dynagent.testing.gcp.pubsub_topics import LocalPubSubTopics

    with LocalCompute(project=PROJECT) as compute, LocalPubSubTopics() as topics:
        yield compute, topics


@pytest.fixture
def cloud_env(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, inputs: dict[str, str]
) -> Iterator[dict[str, str]]:
    """The environment a row's cloud needs, and the URLs it names. The SDK clients the
    command caches are dropped before and after, so each row builds its own from this
    environment, and no later test gets one."""
    drop_cached_clients()
    values = dict(inputs)
    # The Compute rows without a local Compute reach a port nothing listens on.
    monkeypatch.setenv("DYNAGENT_COMPUTE_ENDPOINT", f"http://127.0.0.1:{inputs['closed']}")
    values["queue"] = "https://sqs.us-west-2.amazonaws.com/123456789012/missing.fifo"
    cloud = request.param
    if cloud == "aws":
        aws: LocalAws = request.getfixturevalue("aws")
        for name, value in aws.env().items():
            monkeypatch.setenv(name, value)
        values["queue"] = f"{aws.endpoint_url}/123456789012/missing.fifo"
    elif cloud == "gcp":
        compute, topics = request.getfixturevalue("local_gcp")
        monkeypatch.setenv("DYNAGENT_COMPUTE_ENDPOINT", compute.endpoint)
        monkeypatch.setenv(PUBSUB_ENDPOINT_ENV, topics.endpoint)
    elif cloud == "determined":
        master = request.getfixturevalue("master")
        values["master"] = master.url
        monkeypatch.setenv("DET_USER", "admin")
        monkeypatch.setenv("DET_PASS", "not the password")
    elif cloud == "pubsub":
        from .gcp import emulators

        emulator = emulators.session_pubsub_emulator(request.config)
        for name, value in emulator.env().items():  # PUBSUB_EMULATOR_HOST, its project
            monkeypatch.setenv(name, value)
    yield values
    drop_cached_clients()


def drop_cached_clients() -> None:
    for cached in (aws_clients.ec2_client, aws_clients.sqs_client):
        cached.cache_clear()
    for cached in (gcp_clients.instances_client, gcp_clients.zone_operations_client):
        cached.cache_clear()


# --------------------------------------------------------------------------------------
# The tables
# --------------------------------------------------------------------------------------


def check(code: int, out: str, err: str, says: tuple[str, ...], values: dict[str, str]) -> None:
    assert code != 0, out
    assert "Traceback" not in out + err
    # The message: the lines that say what went wrong (argparse's usage aside).
    message = [line for line in err.splitlines() if line.startswith("dynagent")]
    assert 1 <= len(message) <= 2, err
    for words in says:
        assert fill(words, values) in "\n".join(message), err


@pytest.mark.parametrize(
    ("table_row", "cloud_env"),
    [pytest.param(r, r.cloud, id=name) for name, r in ROWS.items()],
    indirect=["cloud_env"],
)
def test_a_bad_input_is_a_short_message(
    table_row: Row, cloud_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [fill(word, cloud_env) for word in table_row.argv]
    try:
        code = cli.main(argv)
    except SystemExit as refused:  # argparse's own refusals
        code = int(refused.code or 0)
    captured = capsys.readouterr()
    check(code, captured.out, captured.err, table_row.says, cloud_env)


def no_credentials_env(**extra: str) -> dict[str, str]:
    """This environment, with no way for boto3 or google-auth to find credentials."""
    clouds = ("AWS_", "GOOGLE_", "CLOUDSDK_", "GCE_", "DYNAGENT_", "PUBSUB_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(clouds)}
    nowhere = "/nonexistent/dynagent-test"
    env.update(
        AWS_SHARED_CREDENTIALS_FILE=nowhere,
        AWS_CONFIG_FILE=nowhere,
        AWS_EC2_METADATA_DISABLED="true",
        CLOUDSDK_CONFIG=nowhere,
        # Not on GCE: google-auth asks no metadata server (it would wait seconds for one).
        NO_GCE_CHECK="true",
        GCE_METADATA_HOST=f"127.0.0.1:{free_port()}",
        GCE_METADATA_IP=f"127.0.0.1:{free_port()}",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "shared"), env.get("PYTHONPATH")])),
    )
    env.update(extra)
    return env


def run_dynagent(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "dynagent.cli.main", *argv]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("table_row", ISOLATED_ROWS.values(), ids=ISOLATED_ROWS.keys())
def test_without_credentials_or_endpoint_a_short_message(
    table_row: Row, inputs: dict[str, str]
) -> None:
    extra = {}
    if table_row.cloud == "nowhere":
        extra = {
            "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
            "AWS_SECRET_ACCESS_KEY": "secret",
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{inputs['closed']}",
        }
    argv = [fill(word, inputs) for word in table_row.argv]
    done = run_dynagent(argv, no_credentials_env(**extra))
    check(done.returncode, done.stdout, done.stderr, table_row.says, inputs)


def test_every_subcommand_has_bad_inputs_in_the_tables() -> None:
    commands = set(cli.subcommands())
    assert len(commands) >= 8
    tried = {r.argv[0] for r in (*ROWS.values(), *ISOLATED_ROWS.values()) if r.argv}
    assert commands <= tried


def test_an_aws_pool_needs_no_google_credentials(aws: LocalAws, inputs: dict[str, str]) -> None:
    """A config of both clouds, where only AWS credentials are at hand: status shows the
    AWS pool and names the GCP pool it skipped; with --cloud aws it is a success, and so
    is plan of the AWS pool."""
    env = no_credentials_env(**aws.env())
    mixed = inputs["mixed"]
    both = run_dynagent(["status", "--config", mixed], env)
    assert both.returncode == 1
    assert both.stdout.startswith("pool gpu (aws) at ")
    assert "last snapshot: not read (give --queue" in both.stdout
    [skipped] = both.stderr.splitlines()
    assert skipped.startswith(
        f"dynagent: pool t4 (gcp) skipped: Compute Engine: {NO_GOOGLE_CREDENTIALS}"
    )
    for argv in (["status", "--cloud", "aws"], ["plan", "--pool", "gpu"]):
        done = run_dynagent([*argv, "--config", mixed], env)
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""


@pytest.mark.parametrize(
    "source",
    [
        "projects/p/topics/dynagent-drain-notices",  # the topic, where the subscription goes
        "dynagent-drain-notices",
        "sqs.us-west-2.amazonaws.com/123456789012/drain-notices",
        "projects/p/subscriptions/",
    ],
)
def test_the_bridge_refuses_drain_notices_from_neither_form_with_exit_2(
    source: str, inputs: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad value is a usage error, refused before the master or a cloud is reached:
    the one line names the flag, the value and both forms it takes."""
    argv = ["bridge", "--master", f"http://127.0.0.1:{inputs['closed']}", "--config"]
    argv += [inputs["gcp"], "--print", "--once", "--drain-notices", source]
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == 2
    assert err.splitlines() == [
        f"dynagent bridge: --drain-notices {source!r} is neither an SQS queue URL "
        "(https://sqs.REGION.amazonaws.com/ACCOUNT/NAME) nor a Pub/Sub subscription "
        "(projects/PROJECT/subscriptions/NAME)"
    ]
