"""Slots per machine, one home for both clouds: Determined's tables and dynagent's additions.

A pool's slots per instance come from here when its config does not give them. The EC2
table mirrors Determined's provisioner (master/internal/config/provconfig/aws_config.go,
``ec2InstanceSlots``): GPU types count their GPUs and CPU types count 0 (a zero-slot agent
runs only aux tasks, or 1 CPU slot with ``cpu_slots_allowed``). dynagent adds newer GPU
families Determined's table lacks, from the EC2 accelerated-computing instance pages;
a pool using one of those loads with a warning, since Determined would need
``instance_slots`` for it. The Compute Engine tables mirror gcp_config.go
(``gceMachineTypes``, ``gceGPUTypes``), with dynagent's additions marked the same way.
"""

from __future__ import annotations

import re

_ONE_GPU_SIZES = ("xlarge", "2xlarge", "4xlarge", "8xlarge", "16xlarge")


def _family(name: str, sizes: tuple[str, ...], slots: int = 0) -> dict[str, int]:
    return {f"{name}.{size}": slots for size in sizes}


def _gpu_family(name: str, multi: dict[str, int]) -> dict[str, int]:
    return {**_family(name, _ONE_GPU_SIZES, 1), **{f"{name}.{s}": n for s, n in multi.items()}}


_C5 = ("large", "xlarge", "2xlarge", "4xlarge", "9xlarge", "12xlarge", "18xlarge", "24xlarge")
_M5 = ("large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge")

# Determined's ec2InstanceSlots, entry for entry.
DETERMINED_EC2_SLOTS: dict[str, int] = {
    **_gpu_family("g4dn", {"12xlarge": 4, "metal": 8}),
    **_gpu_family("g5", {"12xlarge": 4, "24xlarge": 4, "48xlarge": 8}),
    "p2.xlarge": 1, "p2.8xlarge": 8, "p2.16xlarge": 16,
    "p3.2xlarge": 1, "p3.8xlarge": 4, "p3.16xlarge": 8, "p3dn.24xlarge": 8,
    "p4d.24xlarge": 8,
    **_family("t2", ("medium", "large", "xlarge", "2xlarge")),
    **_family("t3", ("nano", "micro", "small", "medium", "large", "xlarge", "2xlarge")),
    **_family("c4", ("large", "xlarge", "2xlarge", "4xlarge", "8xlarge")),
    **_family("c5", _C5),
    **_family("c5d", _C5),
    **_family("c5n", ("large", "xlarge", "2xlarge", "4xlarge", "9xlarge", "18xlarge")),
    **_family("m4", ("large", "xlarge", "2xlarge", "4xlarge", "10xlarge", "16xlarge")),
    **_family("m5", _M5),
    **_family("m5d", _M5),
    **_family("m5dn", _M5),
    **_family("m5n", _M5),
    **_family("m5zn", ("large", "xlarge", "2xlarge", "3xlarge", "6xlarge", "12xlarge")),
    **_family("m6i", ("large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge")),
}  # fmt: skip

# GPU types dynagent knows beyond Determined's table.
DYNAGENT_EC2_SLOTS: dict[str, int] = {
    "p4de.24xlarge": 8, "p5.48xlarge": 8, "p5e.48xlarge": 8, "p5en.48xlarge": 8,
    "g3s.xlarge": 1, "g3.4xlarge": 1, "g3.8xlarge": 2, "g3.16xlarge": 4,
    **_gpu_family("g6", {"12xlarge": 4, "24xlarge": 4, "48xlarge": 8}),
    **_gpu_family("g6e", {"12xlarge": 4, "24xlarge": 4, "48xlarge": 8}),
}  # fmt: skip

EC2_SLOTS: dict[str, int] = {**DETERMINED_EC2_SLOTS, **DYNAGENT_EC2_SLOTS}
# The GPU types alone (the CPU types count 0 slots).
AWS_GPUS_PER_INSTANCE: dict[str, int] = {t: n for t, n in EC2_SLOTS.items() if n}


def aws_gpus(instance_type: str) -> int | None:
    """Slots of an EC2 instance type (its GPUs; 0 for a CPU type), or None when unknown."""
    return EC2_SLOTS.get(instance_type)


# The GPU model of each EC2 family, so a pool can refuse to mix models by mistake.
AWS_GPU_MODELS: dict[str, str] = {
    "p2": "K80", "p3": "V100", "p3dn": "V100", "p4d": "A100", "p4de": "A100-80GB",
    "p5": "H100", "p5e": "H200", "p5en": "H200", "g3s": "M60", "g3": "M60", "g4dn": "T4",
    "g5": "A10G", "g6": "L4", "g6e": "L40S",
}  # fmt: skip


def aws_gpu_model(instance_type: str) -> str | None:
    """The GPU model of an EC2 instance type, or None when the table does not know it."""
    return AWS_GPU_MODELS.get(instance_type.split(".", 1)[0])


# Determined's gceGPUTypes: the GPU counts one VM may take (0 is always allowed).
DETERMINED_GCE_GPU_COUNTS: dict[str, frozenset[int]] = {
    "": frozenset({0}),
    "nvidia-tesla-t4": frozenset({0, 1, 2, 4}),
    "nvidia-tesla-p100": frozenset({0, 1, 2, 4}),
    "nvidia-tesla-p4": frozenset({0, 1, 2, 4}),
    "nvidia-tesla-v100": frozenset({0, 1, 2, 4, 8}),
    "nvidia-tesla-a100": frozenset({0, 1, 2, 4, 8, 16}),
    "nvidia-a100-80gb": frozenset({0, 1, 2, 4, 8}),
    "nvidia-l4": frozenset({0, 1, 2, 4, 8}),
}
# Accelerators dynagent knows beyond Determined's table, from the GPU platforms page.
DYNAGENT_GCE_GPU_COUNTS: dict[str, frozenset[int]] = {
    "nvidia-tesla-k80": frozenset({0, 1, 2, 4, 8}),
    "nvidia-h100-80gb": frozenset({0, 8}),
    "nvidia-h100-mega-80gb": frozenset({0, 8}),
    "nvidia-h200-141gb": frozenset({0, 8}),
}
GCE_GPU_COUNTS: dict[str, frozenset[int]] = {
    **DETERMINED_GCE_GPU_COUNTS,
    **DYNAGENT_GCE_GPU_COUNTS,
}


def gce_gpu_problem(gpu_type: str, count: int) -> str | None:
    """Why ``count`` GPUs of ``gpu_type`` cannot be had, or None (gceInstanceType.Validate)."""
    counts = GCE_GPU_COUNTS.get(gpu_type)
    if counts is None:
        known = ", ".join(sorted(t for t in GCE_GPU_COUNTS if t))
        return f"gpu_type {gpu_type!r} is not a Compute Engine GPU (known: {known})"
    if count not in counts:
        allowed = ", ".join(str(n) for n in sorted(counts))
        return f"gpu_num {count} is not offered for {gpu_type or 'no gpu_type'} (one of {allowed})"
    return None


# Determined's gceMachineTypes: the machine families its provisioner accepts.
DETERMINED_GCE_MACHINE_FAMILIES = (
    "n1-standard", "n1-highmem", "n1-highcpu", "n1-ultramem", "m2-ultramem", "n1-megamem",
    "c2-standard", "a2-highgpu", "a2-megagpu", "a2-ultragpu", "g2-standard", "n2-standard",
    "custom",
)  # fmt: skip
_MACHINE_TYPE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)+$")


def gce_machine_type_problem(machine_type: str) -> str | None:
    """Why ``machine_type`` cannot name a Compute Engine machine type, or None."""
    if not _MACHINE_TYPE.match(machine_type):
        return (
            f"machine_type {machine_type!r} is not a Compute Engine machine type "
            "(like n1-standard-8 or a2-highgpu-1g)"
        )
    return None


def determined_accepts_machine_type(machine_type: str) -> bool:
    """Determined's rule (gceInstanceType.Validate): three dash-separated parts, and a
    known family as the prefix."""
    return len(machine_type.split("-")) == 3 and machine_type.startswith(
        DETERMINED_GCE_MACHINE_FAMILIES
    )
