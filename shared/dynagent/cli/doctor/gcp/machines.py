"""The machines of a GCP pool: its boot image, and its machine and accelerator types in
each of its zones."""

from __future__ import annotations

import re

from google.api_core import exceptions as google_errors

from dynagent.cli.doctor.findings import Finding, fail, ok
from dynagent.core.config import Pool
from dynagent.core.pools.gcp import GcpInstanceType

from . import shape
from .apis import GcpApis, message

# projects/P/global/images/NAME or .../images/family/F (or global/images/...: the pool's)
_IMAGE = re.compile(
    r"(?:projects/(?P<project>[^/]+)/)?global/images/(?:family/(?P<family>[^/]+)|(?P<image>[^/]+))"
)


def image(pool: Pool, apis: GcpApis) -> Finding:
    """The boot image exists and the caller may read it."""
    p = shape.provider(pool)
    source = p.boot_disk_source_image
    what = f"{shape.label(pool)}: boot image {source}"
    ref = _IMAGE.fullmatch(shape.relative(source))
    if ref is None:
        return fail(
            "gcp.image",
            what,
            "not an image path",
            "write projects/PROJECT/global/images/NAME (or .../images/family/FAMILY)",
        )
    project = ref["project"] or p.project
    images = apis.compute("ImagesClient")
    try:
        if ref["family"]:
            found = images.get_from_family(project=project, family=ref["family"])
        else:
            found = images.get(project=project, image=ref["image"])
    except google_errors.NotFound:
        return fail(
            "gcp.image",
            what,
            "no such image",
            f"set boot_disk_source_image to an image that exists (gcloud compute images list "
            f"--project {project})",
        )
    except google_errors.Forbidden as error:
        return fail(
            "gcp.image",
            what,
            f"not readable: {message(error)}",
            f"share it: grant roles/compute.imageUser on project {project} to the functions' "
            "service account (and to you)",
        )
    if found.status != "READY":
        return fail("gcp.image", what, f"the image is {found.status}", "use a READY image")
    return ok("gcp.image", what, f"{found.name}, {found.architecture or 'READY'}")


def machine_types(pool: Pool, apis: GcpApis) -> list[Finding]:
    """Each machine's type, and its GPUs' type, offered in each of the pool's zones."""
    return [_machine(pool, machine, apis) for machine in shape.machines(pool)]


def _machine(pool: Pool, machine: GcpInstanceType, apis: GcpApis) -> Finding:
    p = shape.provider(pool)
    zones = shape.zones(pool)
    what = f"{shape.label(pool)}: {shape.describe(machine)} in {', '.join(zones)}"
    problems = []
    for zone in zones:
        try:
            apis.compute("MachineTypesClient").get(
                project=p.project, zone=zone, machine_type=machine.machine_type
            )
        except google_errors.NotFound:
            problems.append(f"{zone} has no machine type {machine.machine_type}")
        if machine.gpu_num:
            problems += _accelerator(p.project, zone, machine, apis)
    if problems:
        return fail(
            "gcp.machine_type",
            what,
            "; ".join(problems),
            "use zones that offer them (gcloud compute machine-types list, gcloud compute "
            "accelerator-types list), or other machines (offerings.zones, offerings.machines)",
        )
    return ok("gcp.machine_type", what)


def _accelerator(project: str, zone: str, machine: GcpInstanceType, apis: GcpApis) -> list[str]:
    try:
        found = apis.compute("AcceleratorTypesClient").get(
            project=project, zone=zone, accelerator_type=machine.gpu_type
        )
    except google_errors.NotFound:
        return [f"{zone} has no GPU {machine.gpu_type}"]
    if found.maximum_cards_per_instance and found.maximum_cards_per_instance < machine.gpu_num:
        return [f"{zone} attaches at most {found.maximum_cards_per_instance} {machine.gpu_type}"]
    return []
