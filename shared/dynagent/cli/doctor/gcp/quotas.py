"""A GCP pool's GPU quotas: the region's (standard, and PREEMPTIBLE_ for spot) and the
project's GPUS_ALL_REGIONS, for one machine (else a failure) and max_instances of them
(else a warning)."""

from __future__ import annotations

from dynagent.cli.doctor.capacity import covers
from dynagent.cli.doctor.findings import Finding, unknown
from dynagent.core.config import Pool
from dynagent.core.offerings import Purchase

from . import shape
from .apis import GcpApis

ALL_REGIONS = "GPUS_ALL_REGIONS"
# Accelerator types whose quota metric is not NVIDIA_<MODEL>_GPUS.
_METRICS = {
    "nvidia-h100-80gb": "NVIDIA_H100_GPUS",
    "nvidia-h100-mega-80gb": "NVIDIA_H100_MEGA_GPUS",
    "nvidia-h200-141gb": "NVIDIA_H200_GPUS",
}


def metric(gpu_type: str) -> str:
    """The regional quota of a GPU: ``nvidia-tesla-t4`` -> ``NVIDIA_T4_GPUS``."""
    model = gpu_type.removeprefix("nvidia-").removeprefix("tesla-")
    return _METRICS.get(gpu_type, f"NVIDIA_{model.upper().replace('-', '_')}_GPUS")


def gpu_quotas(pool: Pool, apis: GcpApis) -> list[Finding]:
    p = shape.provider(pool)
    needs: dict[str, tuple[int, str]] = {}  # metric -> the largest machine drawing on it
    for machine in shape.machines(pool):
        name = metric(machine.gpu_type)
        if machine.gpu_num and machine.gpu_num > needs.get(name, (0, ""))[0]:
            needs[name] = (machine.gpu_num, machine.machine_type)
    if not needs:
        return []
    region = shape.region(pool)
    regional = _limits(apis.compute("RegionsClient").get(project=p.project, region=region).quotas)
    global_ = _limits(apis.compute("ProjectsClient").get(project=p.project).quotas)
    findings = []
    for name, largest in needs.items():
        if shape.purchases(pool) - {Purchase.SPOT}:
            findings.append(_quota(pool, name, f"in {region}", regional.get(name), largest))
        if Purchase.SPOT in shape.purchases(pool):
            findings.append(_spot(pool, name, region, regional, largest))
    largest = max(needs.values())
    where = f"of project {p.project}"
    findings.append(_quota(pool, ALL_REGIONS, where, global_.get(ALL_REGIONS), largest))
    return findings


def _limits(quotas: object) -> dict[str, float]:
    return {q.metric: float(q.limit) for q in quotas}  # type: ignore[attr-defined]


def _spot(
    pool: Pool, name: str, region: str, regional: dict[str, float], largest: tuple[int, str]
) -> Finding:
    """Spot VMs draw on PREEMPTIBLE_ quota when the project has some, else on the standard
    quota (Compute Engine's rule)."""
    preemptible = regional.get(f"PREEMPTIBLE_{name}")
    if not preemptible and regional.get(name):
        where = f"in {region} (for spot: no PREEMPTIBLE_{name})"
        return _quota(pool, name, where, regional.get(name), largest)
    return _quota(pool, f"PREEMPTIBLE_{name}", f"in {region}", preemptible, largest)


def _quota(
    pool: Pool, metric_name: str, where: str, limit: float | None, largest: tuple[int, str]
) -> Finding:
    p = shape.provider(pool)
    gpus, machine = largest
    what = f"{shape.label(pool)}: GPU quota {metric_name} {where}"
    place = where.split(" (")[0]
    fix = (
        f"request {p.max_instances * gpus} GPUs of {metric_name} {place} "
        "(console: IAM & Admin > Quotas)"
    )
    if limit is None:
        return unknown("gcp.quota", what, "Compute Engine reports no such quota here", fix)
    return covers("gcp.quota", what, limit, "GPUs", machine, gpus, p.max_instances, fix)
