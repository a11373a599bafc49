"""The machine's metadata service, as boot scripts reach it and as a plain object."""

from __future__ import annotations

import socket

from dynagent.testing.machines.agent_machine import AgentMachine
from dynagent.testing.machines.metadata_service import (
    MetadataCall,
    MetadataService,
    aws_metadata,
    gcp_metadata,
)


def test_imdsv2_wants_a_token_from_put() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    service = MetadataService("aws", aws_metadata("i-0abc", "us-west-2b"), listener)
    try:
        path = "/latest/meta-data/instance-id"
        assert service.answer("GET", path, {})[0] == 401
        assert service.answer("GET", "/latest/api/token", {})[0] == 405
        assert service.answer("PUT", "/latest/api/token", {})[0] == 400
        too_long = {"x-aws-ec2-metadata-token-ttl-seconds": "21601"}
        assert service.answer("PUT", "/latest/api/token", too_long)[0] == 400
        status, token = service.answer(
            "PUT", "/latest/api/token", {"x-aws-ec2-metadata-token-ttl-seconds": "60"}
        )
        assert status == 200
        assert service.answer("GET", path, {"x-aws-ec2-metadata-token": "nope"})[0] == 401
        header = {"x-aws-ec2-metadata-token": token}
        assert service.answer("GET", path, header) == (200, "i-0abc")
        zone = "/latest/meta-data/placement/availability-zone"
        assert service.answer("GET", zone, header) == (200, "us-west-2b")
        assert service.answer("GET", "/latest/meta-data/nothing", header)[0] == 404
    finally:
        service.close()


def test_gce_wants_the_flavor_header() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    service = MetadataService("gcp", gcp_metadata("det-1", "europe-west4-a"), listener)
    try:
        path = "/computeMetadata/v1/instance/name"
        assert service.answer("GET", path, {})[0] == 403
        assert service.answer("GET", path, {"metadata-flavor": "google"})[0] == 403
        flavor = {"metadata-flavor": "Google"}
        assert service.answer("GET", path, flavor) == (200, "det-1")
        zone = service.answer("GET", "/computeMetadata/v1/instance/zone", flavor)
        assert zone == (200, "projects/123456789012/zones/europe-west4-a")
        forwarded = {**flavor, "x-forwarded-for": "10.0.0.1"}
        assert service.answer("GET", path, forwarded)[0] == 403
        assert service.calls()[0] == MetadataCall("GET", path, 403)
    finally:
        service.close()


def test_an_aws_boot_gets_its_instance_id_only_with_a_token(aws_machine: AgentMachine) -> None:
    aws_machine.boot(
        "#!/bin/bash\n"
        "curl -s -o /dev/null -w 'without %{http_code}\\n' "
        "http://169.254.169.254/latest/meta-data/instance-id\n"
        "TOKEN=$(curl -sf -X PUT http://169.254.169.254/latest/api/token "
        '-H "X-aws-ec2-metadata-token-ttl-seconds: 21600")\n'
        'echo "id $(curl -sf -H "X-aws-ec2-metadata-token: $TOKEN" '
        'http://169.254.169.254/latest/meta-data/instance-id)"\n'
    )
    assert aws_machine.wait_for_boot() == 0
    assert aws_machine.console.splitlines() == ["without 401", "id i-0123456789abcdef0"]
    assert [(c.method, c.status) for c in aws_machine.metadata_calls()] == [
        ("GET", 401),
        ("PUT", 200),
        ("GET", 200),
    ]


def test_a_gcp_boot_finds_metadata_google_internal(gcp_machine: AgentMachine) -> None:
    gcp_machine.boot(
        "#!/bin/bash\n"
        "url=http://metadata.google.internal/computeMetadata/v1/instance/name\n"
        "curl -s -o /dev/null -w 'without %{http_code}\\n' $url\n"
        "echo \"name $(curl -sf -H 'Metadata-Flavor: Google' $url)\"\n"
    )
    assert gcp_machine.wait_for_boot() == 0
    assert gcp_machine.console.splitlines() == ["without 403", "name det-agent-pool-7-0"]
