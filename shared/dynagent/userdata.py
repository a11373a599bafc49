"""The boot script of an agent instance: the admin's startup script, then the agent.

The agent container gets the master's address, the pool, and the instance's own id as
its agent id, so the snapshots the master publishes name agents by instance id.
"""

from __future__ import annotations

import shlex
from urllib.parse import urlsplit

from dynagent.config import ProviderConfig

_DEFAULT_PORTS = {"http": 8080, "https": 8443}


def master_address(master_url: str) -> tuple[str, int, bool]:
    """Host, port and whether TLS is on, from ``http(s)://host[:port]``."""
    parts = urlsplit(master_url if "://" in master_url else f"http://{master_url}")
    scheme = parts.scheme or "http"
    port = parts.port or _DEFAULT_PORTS.get(scheme, 8080)
    return parts.hostname or "", port, scheme == "https"


def agent_startup_script(provider: ProviderConfig, pool: str, agent_id_command: str) -> str:
    """A bash script: run ``startup_script``, then start the agent container.

    ``agent_id_command`` is the shell that prints this instance's agent id (its cloud's
    metadata service).
    """
    host, port, tls = master_address(provider.master_url)
    network = shlex.quote(provider.agent_docker_network)
    env = {
        "DET_MASTER_HOST": host,
        "DET_MASTER_PORT": str(port),
        "DET_RESOURCE_POOL": pool,
        "DET_SECURITY_TLS_ENABLED": "true" if tls else "false",
        "DET_AGENT_RECONNECT_ATTEMPTS": str(provider.agent_reconnect_attempts),
        "DET_AGENT_RECONNECT_BACKOFF": str(provider.agent_reconnect_backoff),
    }
    if provider.master_cert_name:
        env["DET_SECURITY_TLS_MASTER_CERT_NAME"] = provider.master_cert_name
    env_flags = " ".join(f"-e {name}={shlex.quote(value)}" for name, value in env.items())
    gpus = "--gpus all " if provider.slots_per_instance and not provider.cpu_slots_allowed else ""
    lines = [
        "#!/bin/bash",
        "# Written by dynagent: the admin's startup script, then the Determined agent.",
        "set -euo pipefail",
        "mkdir -p /usr/local/determined",
        _write_file("/usr/local/determined/startup_script", provider.startup_script),
        _write_file(
            "/usr/local/determined/container_startup_script", provider.container_startup_script
        ),
        "bash /usr/local/determined/startup_script",
        f"AGENT_ID=$({agent_id_command})",
        f"docker network inspect {network} >/dev/null 2>&1 || docker network create {network}",
        "docker run --detach --restart unless-stopped --name determined-agent "
        f"--network {network} --runtime {shlex.quote(provider.agent_docker_runtime)} {gpus}"
        "-v /var/run/docker.sock:/var/run/docker.sock "
        "-v /usr/local/determined/container_startup_script:"
        "/usr/local/determined/container_startup_script:ro "
        f'-e DET_AGENT_ID="$AGENT_ID" {env_flags} '
        f"{shlex.quote(provider.agent_docker_image)} run",
    ]
    return "\n".join(lines) + "\n"


def _write_file(path: str, content: str) -> str:
    # A quoted heredoc keeps the admin's script byte for byte: no expansion here.
    marker = "DYNAGENT_EOF"
    while marker in content:
        marker += "_"
    body = content if content.endswith("\n") or not content else content + "\n"
    return f"cat > {path} <<'{marker}'\n{body}{marker}"
