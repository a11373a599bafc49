"""The AWS checks with clients from the environment, as the AWS CLI and functions find
them: credentials, region and ``AWS_ENDPOINT_URL`` (a local AWS, in tests)."""

from __future__ import annotations

from collections.abc import Sequence

import boto3
from botocore.config import Config as BotoConfig
from botocore.exceptions import BotoCoreError

from dynagent.config import Config, Pool
from dynagent.doctor import CannotCheck

from .aws import AwsClients, check, shape
from .findings import Finding

_RETRIES = BotoConfig(retries={"mode": "standard", "max_attempts": 5})


def check_aws(config: Config, pools: Sequence[Pool], stack: str | None) -> list[Finding]:
    session = boto3.session.Session()
    if session.get_credentials() is None:
        raise CannotCheck(
            "no AWS credentials: set AWS_PROFILE (or AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY), or run `aws configure`"
        )
    # The stack lives where the functions run: the session's region, else the pools'.
    region = session.region_name or shape.provider(pools[0]).region
    clients = AwsClients(
        lambda service, at: session.client(service, region_name=at, config=_RETRIES)
    )
    try:
        return check(config, pools, clients, stack, region)
    except BotoCoreError as error:  # credentials refused, endpoint unreachable, ...
        raise CannotCheck(f"AWS: {error}") from None
