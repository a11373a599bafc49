"""Hand-written boot scripts for the harness's own tests (not the product's user data).

``agent_boot`` renders a ``#!/bin/bash`` user-data script that starts the agent image the
way a boot script does: ``docker run`` of ``determined-agent`` with the master's address
and the agent's settings as ``DET_*`` variables, plus whatever flags a test adds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dynagent.testing.machines.agent_image import DEFAULT_IMAGE

AWS_INSTANCE_ID = (
    "TOKEN=$(curl -sf -X PUT http://169.254.169.254/latest/api/token "
    '-H "X-aws-ec2-metadata-token-ttl-seconds: 21600")\n'
    'AGENT_ID=$(curl -sf -H "X-aws-ec2-metadata-token: $TOKEN" '
    "http://169.254.169.254/latest/meta-data/instance-id)\n"
)
GCE_INSTANCE_NAME = (
    "AGENT_ID=$(curl -sf -H 'Metadata-Flavor: Google' "
    "http://metadata.google.internal/computeMetadata/v1/instance/name)\n"
)


def agent_boot(
    master_port: int,
    *,
    agent_id: str = "$AGENT_ID",
    prelude: str = AWS_INSTANCE_ID,
    env: Mapping[str, str] | None = None,
    flags: Sequence[str] = ("-d", "--restart", "always", "--gpus", "all"),
    network: str = "default",
    image: str = DEFAULT_IMAGE,
) -> str:
    """A user-data script that runs the agent container, detached by default."""
    settings = {
        "DET_MASTER_HOST": "127.0.0.1",
        "DET_MASTER_PORT": str(master_port),
        "DET_AGENT_ID": agent_id,
        "DET_SLOT_TYPE": "cuda",
        "DET_AGENT_RECONNECT_ATTEMPTS": "2",
        "DET_AGENT_RECONNECT_BACKOFF": "1",
        **(env or {}),
    }
    variables = " ".join(f'-e {name}="{value}"' for name, value in settings.items())
    return (
        "#!/bin/bash\n"
        "set -x\n"
        f"{prelude}"
        f"docker run --init --name determined-agent --network {network} "
        f"{' '.join(flags)} {variables} {image}\n"
    )
