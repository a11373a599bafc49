"""boto3 clients as the functions use them: standard retries, endpoint from the env.

boto3 reads ``AWS_ENDPOINT_URL`` itself, so the same code runs against a local AWS.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import boto3
from botocore.config import Config as BotoConfig

_RETRIES = BotoConfig(retries={"mode": "standard", "max_attempts": 5})


@cache
def ec2_client(region: str) -> Any:
    return boto3.client("ec2", region_name=region, config=_RETRIES)


@cache
def sqs_client(region: str | None = None) -> Any:
    return boto3.client("sqs", region_name=region, config=_RETRIES)


@cache
def ssm_client(region: str) -> Any:
    return boto3.client("ssm", region_name=region, config=_RETRIES)
