"""Stopping and starting instances as EC2 does, where moto does not: StartInstances
draws on the double's scarce capacity (``LocalAws.limit_capacity``) and fails
InsufficientInstanceCapacity (HTTP 500) when a stopped instance's type has none left in
its zone; a start sets the instance's LaunchTime, which EC2 documents as "the time that
the instance was last launched"; and a one-time Spot instance cannot be stopped
(UnsupportedOperation), only terminated.

Simpler than EC2: a stop ends ``stopped`` at once (EC2 passes through ``stopping`` for
a while), a start ``running`` (through ``pending``); a start refused for one instance
refuses the whole call; a stop hands no capacity back to the limits, which count
launches from when they were set.
"""

from __future__ import annotations

from typing import Any

from moto.core.utils import utcnow
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.responses.instances import InstanceResponse

from dynagent.testing.aws.fleet import ON_DEMAND, SPOT, Site, zone_of
from dynagent.testing.aws.instances import as_server_error
from dynagent.testing.aws.knobs import STATE_LOCK, knobs_for

_moto_start_instances = InstanceResponse.start_instances
_moto_stop_instances = InstanceResponse.stop_instances


def _site(backend: Any, instance: Any) -> Site:
    zone = zone_of(backend, instance.subnet_id, instance.availability_zone)
    spot = getattr(instance, "lifecycle", None) == "spot"
    return Site(instance.instance_type, zone, SPOT if spot else ON_DEMAND)


def start_instances(self: Any) -> Any:
    knobs = knobs_for(self.current_account)
    if knobs is None:
        return _moto_start_instances(self)
    backend = self.ec2_backend
    ids = self._get_param("InstanceIds", [])
    with STATE_LOCK:
        stopped = [
            instance
            for instance in backend.get_multi_instances_by_id(ids)
            if instance.state == "stopped"
        ]
        sites = [_site(backend, instance) for instance in stopped]
        for site in sites:
            available = knobs.scarcity.available(site)
            if available is not None and available < sites.count(site):
                zones = [zone.name for zone in backend.describe_availability_zones()]
                return as_server_error(self, knobs.scarcity.insufficient_capacity(site, zones))
        result = _moto_start_instances(self)
        for instance, site in zip(stopped, sites, strict=True):
            instance.launch_time = utcnow()
            knobs.scarcity.consume(site, 1)
    return result


def stop_instances(self: Any) -> Any:
    if knobs_for(self.current_account) is None:
        return _moto_stop_instances(self)
    ids = self._get_param("InstanceIds", [])
    for instance in self.ec2_backend.get_multi_instances_by_id(ids):
        if getattr(instance, "lifecycle", None) == "spot":
            raise EC2ClientError(
                "UnsupportedOperation",
                f"The instance '{instance.id}' is a spot instance and cannot be stopped: "
                "only persistent Spot requests' instances can",
            )
    return _moto_stop_instances(self)


def patches() -> tuple[tuple[type, str, object], ...]:
    return (
        (InstanceResponse, "start_instances", start_instances),
        (InstanceResponse, "stop_instances", stop_instances),
    )
