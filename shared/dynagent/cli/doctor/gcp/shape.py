"""What one GCP pool asks for, as the checks read it: machines, zones, purchases."""

from __future__ import annotations

import re

from dynagent.core.config import GcpProvider, Pool
from dynagent.core.offerings import Purchase
from dynagent.core.pools.gcp import GcpInstanceType


def provider(pool: Pool) -> GcpProvider:
    assert isinstance(pool.provider, GcpProvider)
    return pool.provider


def zones(pool: Pool) -> tuple[str, ...]:
    p = provider(pool)
    return p.offerings.zones if p.offerings and p.offerings.zones else (p.zone,)


def region(pool: Pool) -> str:
    return provider(pool).zone.rsplit("-", 1)[0]


def machines(pool: Pool) -> tuple[GcpInstanceType, ...]:
    return provider(pool).machines()


def purchases(pool: Pool) -> set[Purchase]:
    return {offering.purchase for offering in provider(pool).catalog().offerings}


def describe(machine: GcpInstanceType) -> str:
    gpus = f" + {machine.gpu_num} x {machine.gpu_type}" if machine.gpu_num else ""
    return machine.machine_type + gpus


def label(pool: Pool) -> str:
    return f"pool {pool.name}"


_API_URL = re.compile(r"^https?://[^/]+/compute/[^/]+/")


def relative(reference: str) -> str:
    """A resource path without the API URL a full link starts with."""
    return _API_URL.sub("", reference)
