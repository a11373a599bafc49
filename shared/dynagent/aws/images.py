"""Images that follow a name on AWS: ``image_id: resolve:ssm:NAME``, EC2's own syntax for
the AMI an SSM parameter holds (AWS publishes its Deep Learning AMIs so, under
``/aws/service/deeplearning/...``; an admin may keep their own). Resolved by the
functions at most once a minute (``run.named_images``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from dynagent.core.config import AwsProvider, Pool
from dynagent.run.named_images import ImageNames, NamedImages, NameNotRead

_AMI = re.compile(r"^ami-[0-9a-f]+$")


def image_parameters(ssm_for_region: Callable[[str], Any]) -> NamedImages:
    """The SSM parameters pools name, read with ``ssm_for_region``'s clients."""

    def name_of(pool: Pool) -> tuple[str, str] | None:
        provider = pool.provider
        if not isinstance(provider, AwsProvider) or provider.image_parameter is None:
            return None
        return provider.region, provider.image_parameter

    def read(key: tuple[str, str]) -> str:
        region, parameter = key
        try:
            value = ssm_for_region(region).get_parameter(Name=parameter)["Parameter"]["Value"]
        except (ClientError, BotoCoreError, KeyError) as error:
            raise NameNotRead(
                f"image_id: could not read SSM parameter {parameter} in {region}: {error} "
                "(check that it exists there and that the functions may ssm:GetParameter it)"
            ) from None
        if not isinstance(value, str) or not _AMI.match(value):
            raise NameNotRead(
                f"image_id: SSM parameter {parameter} in {region} holds "
                f"{str(value)[:80]!r}, not an AMI id (ami-...)"
            )
        return value

    def with_image(pool: Pool, image: str) -> Pool:
        provider = pool.provider.model_copy(update={"image_id": image})
        return pool.model_copy(update={"provider": provider})

    def what(key: tuple[str, str]) -> str:
        return f"image_id: SSM parameter {key[1]}"

    return NamedImages(ImageNames(name_of, read, with_image, what))
