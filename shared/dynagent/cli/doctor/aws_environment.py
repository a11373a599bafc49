"""The AWS checks with clients from the environment, as the AWS CLI and functions find
them: credentials, region and ``AWS_ENDPOINT_URL`` (a local AWS, in tests)."""

from __future__ import annotations

from collections.abc import Sequence

import boto3
from botocore.config import Config as BotoConfig
from botocore.exceptions import NoCredentialsError

from dynagent.core.config import Config, Pool

from .aws import AwsClients, check, shape
from .findings import Finding

_RETRIES = BotoConfig(retries={"mode": "standard", "max_attempts": 5})


def check_aws(config: Config, pools: Sequence[Pool], stack: str | None) -> list[Finding]:
    session = boto3.session.Session()
    if session.get_credentials() is None:
        raise NoCredentialsError()  # said once, before any check would say it again
    # The stack lives where the functions run: the session's region, else the pools'.
    region = session.region_name or shape.provider(pools[0]).region
    return check(config, pools, _clients(session), stack, region)


def _clients(session: boto3.session.Session) -> AwsClients:
    return AwsClients(
        lambda service, region: session.client(service, region_name=region, config=_RETRIES)
    )
