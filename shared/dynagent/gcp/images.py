"""Images that follow a family on GCP: ``boot_disk_source_image:
projects/P/global/images/family/F``, Compute Engine's own way to name the newest image
of a family (Google publishes its Deep Learning VM images so; an admin may keep their
own family). Resolved by the functions at most once a minute (``run.named_images``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dynagent.core.config import GcpProvider, Pool
from dynagent.run.named_images import ImageNames, NamedImages, NameNotRead


def image_families(images: Callable[[], Any]) -> NamedImages:
    """The image families pools name, read with ``images()``'s ImagesClient."""

    def name_of(pool: Pool) -> tuple[str, str] | None:
        provider = pool.provider
        return provider.image_family if isinstance(provider, GcpProvider) else None

    def read(key: tuple[str, str]) -> str:
        # Imported here: a function whose pools name no family never pays for it.
        from google.api_core import exceptions as google_errors

        project, family = key
        try:
            found = images().get_from_family(project=project, family=family)
        except google_errors.GoogleAPIError as error:
            raise NameNotRead(
                f"boot_disk_source_image: could not read image family {family} of project "
                f"{project}: {error} (check that the family has a READY image and that the "
                "functions' service account may use it: roles/compute.imageUser)"
            ) from None
        return f"projects/{project}/global/images/{found.name}"

    def with_image(pool: Pool, image: str) -> Pool:
        provider = pool.provider.model_copy(update={"boot_disk_source_image": image})
        return pool.model_copy(update={"provider": provider})

    def what(key: tuple[str, str]) -> str:
        return f"boot_disk_source_image: family {key[1]}"

    return NamedImages(ImageNames(name_of, read, with_image, what))
