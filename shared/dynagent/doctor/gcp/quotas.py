"""A GCP pool's GPU quotas: the region's (standard, and PREEMPTIBLE_ for spot) and the
project's GPUS_ALL_REGIONS, for one machine (else a failure) and max_instances of them
(else a warning)."""

from __future__ import annotations

from dynagent.config import Pool
from dynagent.doctor.findings import Finding, fail, ok, unknown, warn
from dynagent.offerings import Purchase

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
    needs: dict[str, int] = {}  # metric -> GPUs of the largest machine drawing on it
    for machine in shape.machines(pool):
        if machine.gpu_num:
            name = metric(machine.gpu_type)
            needs[name] = max(needs.get(name, 0), machine.gpu_num)
    if not needs:
        return []
    region = shape.region(pool)
    regional = _limits(apis.compute("RegionsClient").get(project=p.project, region=region).quotas)
    global_ = _limits(apis.compute("ProjectsClient").get(project=p.project).quotas)
    findings = []
    for name, gpus in needs.items():
        if shape.purchases(pool) - {Purchase.SPOT}:
            findings.append(_covers(pool, name, f"in {region}", regional.get(name), gpus))
        if Purchase.SPOT in shape.purchases(pool):
            findings.append(_spot(pool, name, region, regional, gpus))
    largest = max(needs.values())
    where = f"of project {p.project}"
    findings.append(_covers(pool, ALL_REGIONS, where, global_.get(ALL_REGIONS), largest))
    return findings


def _limits(quotas: object) -> dict[str, float]:
    return {q.metric: float(q.limit) for q in quotas}  # type: ignore[attr-defined]


def _spot(pool: Pool, name: str, region: str, regional: dict[str, float], gpus: int) -> Finding:
    """Spot VMs draw on PREEMPTIBLE_ quota when the project has some, else on the standard
    quota (Compute Engine's rule)."""
    preemptible = regional.get(f"PREEMPTIBLE_{name}")
    if not preemptible and regional.get(name):
        where = f"in {region} (for spot: no PREEMPTIBLE_{name})"
        return _covers(pool, name, where, regional.get(name), gpus)
    return _covers(pool, f"PREEMPTIBLE_{name}", f"in {region}", preemptible, gpus)


def _covers(pool: Pool, metric_name: str, where: str, limit: float | None, gpus: int) -> Finding:
    p = shape.provider(pool)
    what = f"{shape.label(pool)}: GPU quota {metric_name} {where}"
    full = p.max_instances * gpus
    place = where.split(" (")[0]
    fix = f"request {full} GPUs of {metric_name} {place} (console: IAM & Admin > Quotas)"
    if limit is None:
        return unknown("gcp.quota", what, "Compute Engine reports no such quota here", fix)
    if limit < gpus:
        return fail("gcp.quota", what, f"{limit:g} GPUs, one machine needs {gpus}", fix)
    if limit < full:
        return warn(
            "gcp.quota",
            what,
            f"{limit:g} GPUs: one machine ({gpus}) fits, max_instances {p.max_instances} "
            f"need {full}",
            fix,
        )
    return ok("gcp.quota", what, f"{limit:g} GPUs, {p.max_instances} machines need {full}")
