"""The Lambda concurrency the stack reserves, against what the account can spare.

Lambda grants a function reserved concurrency only while the account keeps a minimum
unreserved: "You can reserve up to the Unreserved account concurrency value that is
shown, minus 100" (Lambda's guide, "Configuring reserved concurrency"). A new account's
*Concurrent executions* quota is often 10, so the deploy fails with "Specified
ReservedConcurrentExecutions for function decreases account's
UnreservedConcurrentExecution below its minimum value of [N]".
"""

from __future__ import annotations

from typing import Any, Final

from botocore.exceptions import ClientError

from dynagent.cli.doctor.findings import Finding, fail, ok

# template.yaml's SweepFunction and InterruptionFunction each set
# ReservedConcurrentExecutions: 1 (one sweep, one spot notice at a time).
# tests/doctor/test_aws.py checks this against template.yaml.
RESERVED: Final = {"SweepFunction": 1, "InterruptionFunction": 1}
RESERVATIONS: Final = sum(RESERVED.values())
# What Lambda keeps unreserved, as its guide documents it (accounts have been told 10,
# 50 or 100; 100 is the one that holds for all of them).
MINIMUM_UNRESERVED: Final = 100
QUOTA_CODE: Final = "L-B99A9384"  # Service Quotas, service lambda: Concurrent executions


def held(lambda_client: Any, functions: dict[str, str]) -> int:
    """The reservations the deployed stack's functions already hold, from the stack's
    logical ids -> function names (missing functions hold none)."""
    total = 0
    for logical in RESERVED:
        name = functions.get(logical)
        if name is None:
            continue
        try:
            answer = lambda_client.get_function_concurrency(FunctionName=name)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
                raise
            continue
        total += int(answer.get("ReservedConcurrentExecutions") or 0)
    return total


def concurrency(lambda_client: Any, region: str, holding: int = 0) -> Finding:
    """The account can reserve what the stack's functions still need (GetAccountSettings)."""
    what = f"Lambda concurrency in {region}"
    limits = lambda_client.get_account_settings()["AccountLimit"]
    limit = int(limits["ConcurrentExecutions"])
    unreserved = int(limits["UnreservedConcurrentExecutions"])
    counts = f"{unreserved} of {limit} unreserved"
    if holding >= RESERVATIONS:
        return ok("aws.lambda_concurrency", what, f"{counts}; the stack's functions hold theirs")
    needed = RESERVATIONS - holding
    if unreserved - needed >= MINIMUM_UNRESERVED:
        return ok("aws.lambda_concurrency", what, f"{counts}; the stack reserves {needed}")
    # Whatever other functions reserve stays reserved; the stack's need comes on top.
    desired = limit - unreserved + needed + MINIMUM_UNRESERVED
    return fail(
        "aws.lambda_concurrency",
        what,
        f"{counts}: the stack's sweep and interruption functions reserve {needed}, and "
        f"Lambda keeps {MINIMUM_UNRESERVED} unreserved, so the deploy would fail",
        f"raise the Lambda quota Concurrent executions ({QUOTA_CODE}) to at least "
        f"{desired}: aws service-quotas request-service-quota-increase --service-code "
        f"lambda --quota-code {QUOTA_CODE} --region {region} --desired-value {desired}",
    )
