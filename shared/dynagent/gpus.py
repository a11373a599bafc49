"""GPUs per EC2 instance type, for pools that do not set ``instance_slots``.

Figures are from the EC2 accelerated-computing instance pages. A type missing here
needs ``instance_slots`` in the pool's config (checked when the config loads).
"""

from __future__ import annotations

_ONE_GPU_SIZES = ("xlarge", "2xlarge", "4xlarge", "8xlarge", "16xlarge")


def _family(name: str, singles: tuple[str, ...], multi: dict[str, int]) -> dict[str, int]:
    table = {f"{name}.{size}": 1 for size in singles}
    table.update({f"{name}.{size}": gpus for size, gpus in multi.items()})
    return table


AWS_GPUS_PER_INSTANCE: dict[str, int] = {
    "p2.xlarge": 1, "p2.8xlarge": 8, "p2.16xlarge": 16,
    "p3.2xlarge": 1, "p3.8xlarge": 4, "p3.16xlarge": 8, "p3dn.24xlarge": 8,
    "p4d.24xlarge": 8, "p4de.24xlarge": 8,
    "p5.48xlarge": 8, "p5e.48xlarge": 8, "p5en.48xlarge": 8,
    "g3s.xlarge": 1, "g3.4xlarge": 1, "g3.8xlarge": 2, "g3.16xlarge": 4,
    **_family("g4dn", _ONE_GPU_SIZES, {"12xlarge": 4, "metal": 8}),
    **_family("g5", _ONE_GPU_SIZES, {"12xlarge": 4, "24xlarge": 4, "48xlarge": 8}),
    **_family("g6", _ONE_GPU_SIZES, {"12xlarge": 4, "24xlarge": 4, "48xlarge": 8}),
    **_family("g6e", _ONE_GPU_SIZES, {"12xlarge": 4, "24xlarge": 4, "48xlarge": 8}),
}  # fmt: skip


def aws_gpus(instance_type: str) -> int | None:
    """GPUs of an EC2 instance type, or None when the table does not know it."""
    return AWS_GPUS_PER_INSTANCE.get(instance_type)


# The GPU model of each EC2 family, so a pool can refuse to mix models by mistake.
AWS_GPU_MODELS: dict[str, str] = {
    "p2": "K80", "p3": "V100", "p3dn": "V100", "p4d": "A100", "p4de": "A100-80GB",
    "p5": "H100", "p5e": "H200", "p5en": "H200", "g3s": "M60", "g3": "M60", "g4dn": "T4",
    "g5": "A10G", "g6": "L4", "g6e": "L40S",
}  # fmt: skip


def aws_gpu_model(instance_type: str) -> str | None:
    """The GPU model of an EC2 instance type, or None when the table does not know it."""
    return AWS_GPU_MODELS.get(instance_type.split(".", 1)[0])


# Compute Engine accelerator types and the counts one VM may attach, from the GPU
# platforms page (A100/H100/L4 come with their a2/a3/g2 machine types).
GCE_GPU_COUNTS: dict[str, frozenset[int]] = {
    "nvidia-tesla-k80": frozenset({1, 2, 4, 8}),
    "nvidia-tesla-p4": frozenset({1, 2, 4}),
    "nvidia-tesla-p100": frozenset({1, 2, 4}),
    "nvidia-tesla-v100": frozenset({1, 2, 4, 8}),
    "nvidia-tesla-t4": frozenset({1, 2, 4}),
    "nvidia-tesla-a100": frozenset({1, 2, 4, 8, 16}),
    "nvidia-a100-80gb": frozenset({1, 2, 4, 8}),
    "nvidia-l4": frozenset({1, 2, 4, 8}),
    "nvidia-h100-80gb": frozenset({8}),
    "nvidia-h100-mega-80gb": frozenset({8}),
    "nvidia-h200-141gb": frozenset({8}),
}


def gce_gpu_problem(gpu_type: str, count: int) -> str | None:
    """Why Compute Engine would refuse ``count`` GPUs of ``gpu_type``, or None."""
    counts = GCE_GPU_COUNTS.get(gpu_type)
    if counts is None:
        known = ", ".join(sorted(GCE_GPU_COUNTS))
        return f"gpu_type {gpu_type!r} is not a Compute Engine GPU (known: {known})"
    if count not in counts:
        allowed = ", ".join(str(n) for n in sorted(counts))
        return f"gpu_num {count} is not offered for {gpu_type} (one VM takes {allowed})"
    return None
