"""An AWS pool's vCPU quotas: On-Demand and Spot, per instance family (Service Quotas).

EC2 counts running vCPUs against one quota per family and purchase option; the codes are
AWS's, the same in every region (Service Quotas console, service ``ec2``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from dynagent.cli.doctor.capacity import covers
from dynagent.cli.doctor.findings import Finding, fail, unknown
from dynagent.core.config import Pool
from dynagent.core.offerings import Purchase

from . import shape
from .view import Ec2View


@dataclass(frozen=True)
class Family:
    name: str
    on_demand: str
    spot: str | None  # families EC2 does not sell as spot have no spot quota


_STANDARD = Family("Standard (A, C, D, H, I, M, R, T, Z)", "L-1216C47A", "L-34B43A08")
FAMILIES = {
    "g": Family("G and VT", "L-DB2E81BA", "L-3819A6DF"),
    "vt": Family("G and VT", "L-DB2E81BA", "L-3819A6DF"),
    "p": Family("P", "L-417A185B", "L-7212CCBC"),
    "f": Family("F", "L-74FC7D96", "L-88CF9481"),
    "x": Family("X", "L-7295265B", "L-E3A00192"),
    "inf": Family("Inf", "L-1945791B", "L-B5D1601B"),
    "trn": Family("Trn", "L-2C3B7624", "L-6B0D517C"),
    "dl": Family("DL", "L-6E869C2A", "L-85EED4F7"),
    "hpc": Family("HPC", "L-F7808C92", None),
    "u": Family("High Memory", "L-43DA4232", None),
    **dict.fromkeys("acdhimrtz", _STANDARD),
}
_MULTI_LETTER = ("inf", "trn", "dl", "hpc", "vt")


def family(instance_type: str) -> Family | None:
    """The quota family of a type: its leading letters (``inf2`` -> Inf, ``g5`` -> G)."""
    letters = re.match(r"[a-z]+", instance_type)
    if letters is None:
        return None
    run = letters.group()
    return FAMILIES.get(run if run in _MULTI_LETTER else run[0])


QuotaReader = Callable[[str], float | None]


def quota_reader(quotas_client: Any) -> QuotaReader:
    """The value EC2 holds the account to: the applied one, else AWS's default; None when
    Service Quotas has neither."""

    def read(code: str) -> float | None:
        for call in (quotas_client.get_service_quota, quotas_client.get_aws_default_service_quota):
            try:
                return float(call(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"])
            except ClientError as error:
                if error.response.get("Error", {}).get("Code") != "NoSuchResourceException":
                    raise
        return None

    return read


def vcpu_quotas(pool: Pool, view: Ec2View, read: QuotaReader) -> list[Finding]:
    """One finding per (family, purchase) the pool buys."""
    largest: dict[str, tuple[Family, str, int]] = {}
    for name in shape.instance_types(pool):
        kind, vcpus = family(name), view.instance_type(name)
        if kind is None or vcpus is None:
            continue  # the offered check names a type EC2 does not know
        count = int(vcpus["VCpuInfo"]["DefaultVCpus"])
        if kind.on_demand not in largest or count > largest[kind.on_demand][2]:
            largest[kind.on_demand] = (kind, name, count)
    findings = []
    for kind, name, count in largest.values():
        for purchase in shape.provider(pool).purchases:
            findings.append(_one(pool, kind, purchase, name, count, read))
    return findings


def _one(
    pool: Pool, kind: Family, purchase: Purchase, name: str, vcpus: int, read: QuotaReader
) -> Finding:
    p = shape.provider(pool)
    spot = purchase is Purchase.SPOT
    code = kind.spot if spot else kind.on_demand
    market = "Spot" if spot else "On-Demand"
    what = f"{shape.label(pool)}: {market} {kind.name} vCPU quota in {p.region}"
    if code is None:
        return fail(
            "aws.quota", what, f"EC2 sells no {kind.name} instances as spot", "buy them on-demand"
        )
    what += f" ({code})"
    value = read(code)
    full = p.max_instances * vcpus
    ask = (
        f"aws service-quotas request-service-quota-increase --service-code ec2 "
        f"--quota-code {code} --region {p.region} --desired-value {full}"
    )
    if value is None:
        return unknown("aws.quota", what, "Service Quotas reports no value", ask)
    return covers("aws.quota", what, value, "vCPUs", name, vcpus, p.max_instances, ask)
