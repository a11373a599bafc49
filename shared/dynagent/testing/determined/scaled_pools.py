"""The master's side of the pools dynagent scales: the local master restarted with the
``resource_pools`` that ``dynagent master-config`` prints, so it admits their work as a
stock master with that fragment does."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dynagent.core.config import Config
from dynagent.files.master_config import master_pools
from dynagent.testing.determined.master import LocalDetermined


def add_scaled_pools(
    master: LocalDetermined, config: Config, document: Mapping[str, Any] | None = None
) -> None:
    """Restart the master with the config's pools as master-config writes them from
    ``document``, the file the config was read from (its pools' Determined keys, such as
    ``scheduler``, kept), or from the config alone (no agents, no tasks; users and
    logins kept)."""
    master.configure({"resource_pools": master_pools(config, document)})
