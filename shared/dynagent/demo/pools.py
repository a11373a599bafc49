"""The demo's pool configs, one per cloud, with the local cloud's ids filled in."""

from __future__ import annotations

import os
from importlib import resources

from dynagent.core.config import Config, parse_config


def demo_config(cloud: str, **placeholders: str) -> Config:
    name = "pool.yaml" if cloud == "aws" else f"pool-{cloud}.yaml"
    text = resources.files("dynagent.demo").joinpath(name).read_text()
    for key, value in placeholders.items():
        text = text.replace(key, value)
    return parse_config(text, source=f"demo {name}", environ=os.environ)
