"""The fixes installed over moto while any LocalAws runs.

The first LocalAws to start installs every wrapper (those of instances.py, spot.py,
launch_templates.py, stop_start.py and sqs_messages.py, and of iam.py, account.py and
stack.py), and the last to stop removes them; meanwhile each acts only on an account a
LocalAws owns (knobs.py).
"""

from __future__ import annotations

from typing import Final

from moto.ec2.models.instances import InstanceBackend
from moto.ec2.models.spot_requests import SpotInstanceRequest, SpotRequestBackend
from moto.ec2.responses.fleets import Fleets
from moto.ec2.responses.instances import InstanceResponse
from moto.ec2.responses.launch_templates import LaunchTemplates
from moto.ec2.responses.spot_instances import SpotInstances
from moto.sqs.models import SQSBackend

from dynagent.testing.aws.account import patches as account_patches
from dynagent.testing.aws.capacity_reservations import patches as reservation_patches
from dynagent.testing.aws.iam import patches as iam_patches
from dynagent.testing.aws.instances import create_fleet, describe_instances, run_instances
from dynagent.testing.aws.knobs import OWNED, OWNED_LOCK, Knobs, facts_for, owned
from dynagent.testing.aws.launch_templates import (
    create_launch_template,
    create_launch_template_version,
)
from dynagent.testing.aws.spot import (
    cancel_spot_instance_requests,
    describe_spot_instance_requests,
    describe_spot_price_history,
    request_spot_instances,
    spot_create_time,
    spot_get_filter_value,
    spot_instance_id,
    spot_launch_instance,
    spot_request_init,
    spot_status,
    terminate_instances,
)
from dynagent.testing.aws.sqs_messages import sqs_send_message
from dynagent.testing.aws.stack import patches as stack_patches
from dynagent.testing.aws.stop_start import patches as stop_start_patches

# (owner, attribute, replacement): each replaces an attribute the owner defines itself,
# or adds one it lacks (Lambda's GetAccountSettings), removed again when the last stops.
# The method wrappers check that the account is a LocalAws's and otherwise call moto's
# original. The SpotInstanceRequest properties and filter need no check: they differ
# from moto only on state the fixes create, or where moto would fail (status-code filter).
_PATCHES: Final[tuple[tuple[type, str, object], ...]] = (
    (InstanceResponse, "run_instances", run_instances),
    (InstanceResponse, "describe_instances", describe_instances),
    (SpotInstances, "request_spot_instances", request_spot_instances),
    (SpotInstances, "describe_spot_instance_requests", describe_spot_instance_requests),
    (SpotRequestBackend, "cancel_spot_instance_requests", cancel_spot_instance_requests),
    (InstanceBackend, "terminate_instances", terminate_instances),
    (SpotInstanceRequest, "__init__", spot_request_init),
    (SpotInstanceRequest, "launch_instance", spot_launch_instance),
    (SpotInstanceRequest, "status", property(spot_status)),
    (SpotInstanceRequest, "create_time", property(spot_create_time)),
    (SpotInstanceRequest, "instance_id", property(spot_instance_id)),
    (SpotInstanceRequest, "get_filter_value", spot_get_filter_value),
    (Fleets, "create_fleet", create_fleet),
    (SpotInstances, "describe_spot_price_history", describe_spot_price_history),
    (LaunchTemplates, "create_launch_template", create_launch_template),
    (LaunchTemplates, "create_launch_template_version", create_launch_template_version),
    (SQSBackend, "send_message", sqs_send_message),
    *iam_patches(owned),
    *account_patches(facts_for),
    *stack_patches(owned),
    *stop_start_patches(),
    *reservation_patches(),
)
_MISSING: Final = object()
_saved: list[tuple[type, str, object]] = []


def _install_patches() -> None:
    for owner, name, replacement in _PATCHES:
        _saved.append((owner, name, owner.__dict__.get(name, _MISSING)))
        setattr(owner, name, replacement)


def _remove_patches() -> None:
    while _saved:
        owner, name, original = _saved.pop()
        if original is _MISSING:
            delattr(owner, name)
        else:
            setattr(owner, name, original)


def claim(account_id: str, knobs: Knobs) -> None:
    """The patches are installed while any LocalAws runs and act only on owned accounts."""
    with OWNED_LOCK:
        if not OWNED:
            _install_patches()
        OWNED[account_id] = knobs


def release(account_id: str) -> None:
    with OWNED_LOCK:
        OWNED.pop(account_id, None)
        if not OWNED:
            _remove_patches()
