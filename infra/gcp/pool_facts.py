"""What deploy.sh needs to know about the GCP pools, read with dynagent's own config loader.

    pool_facts.py CONFIG
    pool_facts.py --packed CONFIG

Checks CONFIG's GCP pools exactly as the functions will load them, then prints one
tab-separated line per GCP pool, and one per pool of another cloud it leaves out, for
the shell to read without evaluating anything:

    pool  NAME  PROJECT  ZONE  NAME_PREFIX  LABEL_KEY  LABEL_VALUE  SA_EMAIL  EXTERNAL_IP  TAGS
          RESERVATIONS
    left  NAME  CLOUD

SA_EMAIL is the agents' service account, or ``-`` when the pool sets none (the VMs then
get no service account). EXTERNAL_IP, TAGS and RESERVATIONS are ``yes``/``no``: whether
launches give the VM an external address and network tags, and whether the functions
read reservations the pool names, which take IAM permissions of their own.

With ``--packed`` it prints the config to stage as the functions' dynagent.yaml instead:
CONFIG itself, or its GCP pools alone when it also has AWS pools (those belong to the AWS
deployment, and need nothing of this one). A config that does not load, or has no GCP
pool, exits with status 2 and the loader's message (it names the pool and field) on
stderr. Runs under the repository's Python (it imports dynagent from shared/).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))

from dynagent.core.config import ConfigError, GcpProvider
from dynagent.files.packed import PackedConfig, pack_config


@dataclass(frozen=True)
class PoolFacts:
    name: str
    project: str
    zone: str
    name_prefix: str
    label_key: str
    label_value: str
    service_account: str
    external_ip: bool
    network_tags: bool
    reservations: bool

    def line(self) -> str:
        fields = [
            "pool", self.name, self.project, self.zone, self.name_prefix, self.label_key,
            self.label_value, self.service_account or "-",
            _yes(self.external_ip), _yes(self.network_tags), _yes(self.reservations),
        ]  # fmt: skip
        return "\t".join(fields)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def gcp_pools(packed: PackedConfig) -> list[PoolFacts]:
    """The facts of a config's GCP pools."""
    facts = []
    for pool in packed.config.pools.values():
        provider = pool.provider
        assert isinstance(provider, GcpProvider)  # pack_config(..., "gcp") keeps only these
        facts.append(
            PoolFacts(
                name=pool.name,
                project=provider.project,
                zone=provider.zone,
                name_prefix=provider.name_prefix,
                label_key=provider.label_key,
                label_value=provider.label_value,
                service_account=provider.service_account.email,
                external_ip=provider.network_interface.external_ip,
                network_tags=bool(provider.network_tags),
                reservations=bool(provider.reservations),
            )
        )
    return facts


def main(argv: list[str]) -> int:
    packed_only = argv[:1] == ["--packed"]
    paths = argv[1:] if packed_only else argv
    if len(paths) != 1:
        print("usage: pool_facts.py [--packed] CONFIG", file=sys.stderr)
        return 2
    try:
        packed = pack_config(paths[0], "gcp")
    except ConfigError as error:
        print(f"pool_facts.py: {error}", file=sys.stderr)
        return 2
    if packed_only:
        print(packed.text, end="")
        return 0
    for pool in gcp_pools(packed):
        print(pool.line())
    for name, cloud in packed.left.items():
        print("\t".join(("left", name, cloud)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
