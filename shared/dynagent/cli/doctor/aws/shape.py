"""What one AWS pool asks for, as the checks read it: its types, subnets and purchases."""

from __future__ import annotations

from dynagent.core.config import AwsProvider, Pool
from dynagent.core.offerings import Purchase


def provider(pool: Pool) -> AwsProvider:
    assert isinstance(pool.provider, AwsProvider)
    return pool.provider


def instance_types(pool: Pool) -> tuple[str, ...]:
    p = provider(pool)
    return p.offerings.instance_types if p.offerings else (p.instance_type,)


def subnet_ids(pool: Pool) -> list[str]:
    """The subnets launches name; none means the default VPC's default subnets."""
    p = provider(pool)
    if p.offerings and p.offerings.subnet_ids:
        return list(p.offerings.subnet_ids)
    return [p.network_interface.subnet_id] if p.network_interface.subnet_id else []


def buys_spot(pool: Pool) -> bool:
    return Purchase.SPOT in provider(pool).purchases


def label(pool: Pool) -> str:
    return f"pool {pool.name}"
