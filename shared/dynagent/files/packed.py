"""The config one cloud's functions are deployed with, from a pools file that may hold both.

One pools file serves both clouds, and the bridge publishes for all of its pools. `make
sam` packs its AWS pools into the Lambda functions, infra/gcp/deploy.sh its GCP pools
into the Cloud Functions. Each deployment checks and packs its own pools only, so a pool
of the other cloud needs nothing of this one's environment (an unset GCP project, an
unset AWS region), and each names the pools it left to the other.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dynagent.core.config import PROVIDER_TYPES, Config, ConfigError, config_from_document
from dynagent.files.config import read_document

# What deploys each cloud's pools, for messages that send a pool elsewhere.
DEPLOYED_BY = {"aws": "`make sam`", "gcp": "infra/gcp/deploy.sh"}
CLOUD_NAMES = {"aws": "AWS", "gcp": "GCP"}

_HEADER = "# The {cloud} pools of {source}, as {tool} packed them; other clouds' are left out.\n"


@dataclass(frozen=True)
class PackedConfig:
    # The file to pack: the original, unless pools of another cloud were taken out.
    text: str
    # Its pools, checked as the functions will load them.
    config: Config
    # Pools of other clouds, left to their own deployment: name -> cloud.
    left: dict[str, str]


def pack_config(
    path: str | os.PathLike[str], cloud: str, environ: Mapping[str, str] | None = None
) -> PackedConfig:
    """``cloud``'s pools of a config file; ConfigError naming the file when there are
    none (and where the pools it has are deployed)."""
    source = os.fspath(path)
    environ = os.environ if environ is None else environ
    document = read_document(path)
    own, left = split_pools(document, cloud)
    if not left:
        config = config_from_document(document, source, environ)
        return PackedConfig(Path(path).read_text(), config, {})
    if not any(_cloud_of(entry) == cloud for entry in own):
        raise ConfigError(
            f"{source}: no {CLOUD_NAMES[cloud]} pool to deploy here; {describe_left(left)}"
        )
    kept = {**document, "resource_pools": own}
    config = config_from_document(kept, source, environ)
    header = _HEADER.format(cloud=CLOUD_NAMES[cloud], source=source, tool=DEPLOYED_BY[cloud])
    return PackedConfig(header + yaml.safe_dump(kept, sort_keys=False), config, left)


def split_pools(document: Mapping[str, Any], cloud: str) -> tuple[list[Any], dict[str, str]]:
    """The file's pool entries less other clouds' pools (the pools left to the master
    stay, as do entries the loader will refuse), and those pools, name -> cloud."""
    entries = document.get("resource_pools")
    if not isinstance(entries, list):  # none, or the old single-pool form (always AWS)
        return [], {}
    kept, left = [], {}
    for entry in entries:
        kind = _cloud_of(entry)
        if kind is not None and kind != cloud:
            left[str(entry.get("pool_name"))] = kind
        else:
            kept.append(entry)
    return kept, left


def describe_left(left: Mapping[str, str]) -> str:
    """``GCP pools t4, l4 are left to infra/gcp/deploy.sh``, a clause per cloud."""
    return "; ".join(
        f"{CLOUD_NAMES[kind]} pool{'s' if len(names) > 1 else ''} {', '.join(names)} "
        f"{'are' if len(names) > 1 else 'is'} left to {DEPLOYED_BY[kind]}"
        for kind, names in _by_cloud(left).items()
    )


def _by_cloud(left: Mapping[str, str]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for name, kind in left.items():
        grouped.setdefault(kind, []).append(name)
    return grouped


def _cloud_of(entry: Any) -> str | None:
    provider = entry.get("provider") if isinstance(entry, dict) else None
    kind = provider.get("type") if isinstance(provider, dict) else None
    return kind if kind in PROVIDER_TYPES else None
