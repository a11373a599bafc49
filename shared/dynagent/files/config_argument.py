"""The pools file, as every command that reads it takes it: first on the line
(``dynagent validate pools.yaml``) or as ``--config pools.yaml``, one or the other."""

from __future__ import annotations

import argparse


def add_config(parser: argparse.ArgumentParser, help: str) -> None:
    """``config`` positional or ``--config``; ``config_file`` holds the positional one,
    and ``chosen_config`` reads whichever was given."""
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("config_file", nargs="?", metavar="config", help=help)
    which.add_argument("--config", dest="config", help="the same, as --config")


def chosen_config(args: argparse.Namespace) -> str:
    """The pools file given, either way."""
    return str(args.config or args.config_file)
