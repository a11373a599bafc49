"""Reading a snapshot file (``dynagent plan --snapshot``)."""

from __future__ import annotations

import os

from dynagent.core.snapshot import InvalidSnapshot, Snapshot, parse_snapshot

__all__ = ["load_snapshot"]


def load_snapshot(path: str | os.PathLike[str]) -> Snapshot:
    """A snapshot file; InvalidSnapshot names the file (OSError when it cannot be read)."""
    with open(path, "rb") as handle:
        body = handle.read()
    try:
        return parse_snapshot(body)
    except InvalidSnapshot as error:
        raise InvalidSnapshot(f"{os.fspath(path)}: {error}") from None
