"""Built-in on-demand list prices, dollars per hour, for pools that do not set ``prices``.

AWS: the EC2 On-Demand pricing page, Linux, us-east-1, as listed in 2024 (P4 and P5 list
prices were cut in June 2025; set ``prices`` for your region and date). GCP: the Compute
Engine GPU and accelerator-optimized VM pricing pages, us-central1, 2024; a2, a3 and g2
prices include their GPUs, n1 prices are the machine alone (a GPU attached to an n1 is
priced by ``GCE_GPU_PRICES``). They steer the choice among a pool's shapes, where ratios
matter more than cents; docs/offerings.md cites them.
"""

from __future__ import annotations

# The regions the tables below are for: a pool elsewhere pays other prices.
AWS_PRICES_REGION = "us-east-1"
GCE_PRICES_REGION = "us-central1"

AWS_ON_DEMAND: dict[str, float] = {
    "p2.xlarge": 0.90, "p2.8xlarge": 7.20, "p2.16xlarge": 14.40,
    "p3.2xlarge": 3.06, "p3.8xlarge": 12.24, "p3.16xlarge": 24.48, "p3dn.24xlarge": 31.212,
    "p4d.24xlarge": 32.7726, "p4de.24xlarge": 40.9657,
    "p5.48xlarge": 98.32,
    "g4dn.xlarge": 0.526, "g4dn.2xlarge": 0.752, "g4dn.4xlarge": 1.204,
    "g4dn.8xlarge": 2.176, "g4dn.16xlarge": 4.352, "g4dn.12xlarge": 3.912,
    "g4dn.metal": 7.824,
    "g5.xlarge": 1.006, "g5.2xlarge": 1.212, "g5.4xlarge": 1.624, "g5.8xlarge": 2.448,
    "g5.16xlarge": 4.096, "g5.12xlarge": 5.672, "g5.24xlarge": 8.144, "g5.48xlarge": 16.288,
    "g6.xlarge": 0.8048, "g6.2xlarge": 0.9776, "g6.4xlarge": 1.3232, "g6.8xlarge": 2.0144,
    "g6.16xlarge": 3.3968, "g6.12xlarge": 4.6016, "g6.24xlarge": 6.6752,
    "g6.48xlarge": 13.3504,
}  # fmt: skip

GCE_ON_DEMAND: dict[str, float] = {
    "a2-highgpu-1g": 3.673, "a2-highgpu-2g": 7.347, "a2-highgpu-4g": 14.694,
    "a2-highgpu-8g": 29.387, "a2-megagpu-16g": 55.739,
    "a2-ultragpu-1g": 5.069, "a2-ultragpu-2g": 10.138, "a2-ultragpu-4g": 20.276,
    "a2-ultragpu-8g": 40.552,
    "a3-highgpu-8g": 88.253,
    "g2-standard-4": 0.707, "g2-standard-8": 0.854, "g2-standard-12": 1.001,
    "g2-standard-16": 1.147, "g2-standard-24": 2.002, "g2-standard-32": 1.733,
    "g2-standard-48": 4.003, "g2-standard-96": 8.006,
    "n1-standard-4": 0.19, "n1-standard-8": 0.38, "n1-standard-16": 0.76,
    "n1-standard-32": 1.52, "n1-standard-64": 3.04, "n1-standard-96": 4.56,
}  # fmt: skip

# Per GPU-hour, for GPUs attached to general-purpose (n1) machines.
GCE_GPU_PRICES: dict[str, float] = {
    "nvidia-tesla-t4": 0.35, "nvidia-tesla-v100": 2.48, "nvidia-tesla-p100": 1.46,
    "nvidia-tesla-p4": 0.60, "nvidia-tesla-k80": 0.45,
}  # fmt: skip

# Disks, dollars per GB-month, what a stopped machine of a warm pool still bills: EBS gp3
# (the root volume every launch asks for) and Compute Engine's persistent disk types,
# us-east-1 and us-central1 list prices, 2024. A month is 730 hours, as both clouds bill.
EBS_GP3_PER_GB_MONTH = 0.08
GCE_DISK_PER_GB_MONTH: dict[str, float] = {
    "pd-standard": 0.04, "pd-balanced": 0.10, "pd-ssd": 0.17, "pd-extreme": 0.125,
    "hyperdisk-balanced": 0.06,
}  # fmt: skip
HOURS_PER_MONTH = 730


def disk_price_per_hour(size_gb: int, per_gb_month: float) -> float:
    """What a disk of ``size_gb`` costs an hour, running or not."""
    return size_gb * per_gb_month / HOURS_PER_MONTH
