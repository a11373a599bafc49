"""Reading a pool config file, with the deployment's defaults from the process's environment.

The models and their checks are pure (``dynagent.core.config``); what they read from the
disk and the environment is read here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dynagent.core.config import Config, ConfigError, config_from_document, parse_document

__all__ = ["load_config", "read_document"]


def load_config(path: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> Config:
    """Read and check a config file; raise ConfigError naming what is wrong.

    ``environ`` (default: the process's) supplies the deployment's defaults: see
    ``deployment_defaults``.
    """
    env = os.environ if environ is None else environ
    return config_from_document(read_document(path), os.fspath(path), env)


def read_document(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A config file's YAML document: a mapping; ConfigError when it cannot be read."""
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise ConfigError(f"cannot read config {os.fspath(path)!r}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"{os.fspath(path)}: not a text file (byte {error.object[error.start]:#04x} at "
            f"{error.start} is not UTF-8): give the pools file, YAML with resource_pools"
        ) from None
    return parse_document(text, os.fspath(path))
