"""What a project offers and holds besides VMs, for the local Compute (see compute.py).

``dynagent doctor`` reads these before any launch; the local Compute serves them from a
``Catalog`` tests fill, with the API's paths, JSON shapes and errors (404 ``notFound``
``The resource '...' was not found``; 403 ``forbidden`` for an image the caller may not
read):

* ``images.get`` and ``images.getFromFamily`` (the newest READY image of a family): only
  the images added with ``add_image``.
* ``machineTypes.get``: every well-formed machine type exists in every zone unless
  withheld there; ``guestCpus`` is the name's last number. Simpler than Compute Engine:
  no memory sizes, and no bundled GPUs listed for a2/a3/g2 types.
* ``acceleratorTypes.get``: every ``nvidia-*`` type exists in every zone unless withheld,
  with ``maximumCardsPerInstance`` 8 (16 for ``nvidia-tesla-a100``).
* ``regions.get`` and ``projects.get``: the region's and the project's ``quotas`` as set
  with ``set_quota`` (a metric never set is absent, where Compute Engine lists every
  metric it has); a region lists zones -a, -b and -c.
* ``networks.get`` and ``subnetworks.get``: only what ``add_network`` and
  ``add_subnetwork`` made (a real project starts with the ``default`` network).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import Any, Final

JsonObject = dict[str, Any]
API_ROOT: Final = "https://www.googleapis.com/compute/v1/"

# (path below /compute/v1/, API method): all GETs.
ROUTES: Final = (
    ("projects/<project>", "projects.get"),
    ("projects/<project>/regions/<region>", "regions.get"),
    ("projects/<project>/global/images/<image>", "images.get"),
    ("projects/<project>/global/images/family/<family>", "images.getFromFamily"),
    ("projects/<project>/zones/<zone>/machineTypes/<machineType>", "machineTypes.get"),
    ("projects/<project>/zones/<zone>/acceleratorTypes/<acceleratorType>", "acceleratorTypes.get"),
    ("projects/<project>/global/networks/<network>", "networks.get"),
    ("projects/<project>/regions/<region>/subnetworks/<subnetwork>", "subnetworks.get"),
)
METHODS: Final = frozenset(method for _, method in ROUTES)

_MACHINE_TYPE = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)+")
_CPUS = re.compile(r"-(\d+)(?:g)?$")


class Missing(LookupError):
    """No such resource: the API's 404."""

    def __init__(self, resource: str) -> None:
        super().__init__(f"The resource '{resource}' was not found")


class Forbidden(PermissionError):
    """The caller may not read it: the API's 403."""

    def __init__(self, permission: str, resource: str) -> None:
        super().__init__(f"Required '{permission}' permission for '{resource}'")


@dataclass
class Catalog:
    """The project-level state tests arrange; every method takes the catalog's lock."""

    images: dict[tuple[str, str], JsonObject] = field(default_factory=dict)
    unreadable: set[tuple[str, str]] = field(default_factory=set)  # (project, image)
    withheld: set[tuple[str, str]] = field(default_factory=set)  # (zone, type name)
    quotas: dict[tuple[str, str, str], tuple[float, float]] = field(default_factory=dict)
    networks: dict[tuple[str, str], JsonObject] = field(default_factory=dict)
    subnetworks: dict[tuple[str, str, str], JsonObject] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)

    # -- what tests arrange --------------------------------------------------------

    def add_image(
        self,
        project: str,
        name: str,
        family: str = "",
        architecture: str = "X86_64",
        *,
        readable: bool = True,
    ) -> None:
        """An image (READY) in ``project``; ``readable=False``: the caller gets a 403."""
        with self.lock:
            link = f"{API_ROOT}projects/{project}/global/images/{name}"
            image = {"kind": "compute#image", "name": name, "status": "READY",
                     "architecture": architecture, "selfLink": link}  # fmt: skip
            if family:
                image["family"] = family
            self.images[project, name] = image
            if not readable:
                self.unreadable.add((project, name))

    def withhold(self, zone: str, type_name: str) -> None:
        """The machine or accelerator type is not offered in ``zone``."""
        with self.lock:
            self.withheld.add((zone, type_name))

    def set_quota(
        self, project: str, metric: str, limit: float, region: str = "", usage: float = 0
    ) -> None:
        """A quota of ``region`` (``regions.get``), or of the project (``projects.get``)
        when ``region`` is empty, such as GPUS_ALL_REGIONS."""
        with self.lock:
            self.quotas[project, region, metric] = (float(limit), float(usage))

    def add_network(self, project: str, name: str, auto_subnetworks: bool = False) -> None:
        with self.lock:
            self.networks[project, name] = {
                "kind": "compute#network",
                "name": name,
                "autoCreateSubnetworks": auto_subnetworks,
                "selfLink": f"{API_ROOT}projects/{project}/global/networks/{name}",
            }

    def add_subnetwork(
        self, project: str, region: str, name: str, network: str, cidr: str = "10.128.0.0/20"
    ) -> None:
        with self.lock:
            self.subnetworks[project, region, name] = {
                "kind": "compute#subnetwork",
                "name": name,
                "region": f"{API_ROOT}projects/{project}/regions/{region}",
                "network": f"{API_ROOT}projects/{project}/global/networks/{network}",
                "ipCidrRange": cidr,
                "selfLink": f"{API_ROOT}projects/{project}/regions/{region}/subnetworks/{name}",
            }

    # -- what the API serves ---------------------------------------------------------

    def read(self, api_method: str, project: str, zone: str, path: dict[str, str]) -> JsonObject:
        with self.lock:
            if api_method == "images.get":
                return self._image(project, path["image"])
            if api_method == "images.getFromFamily":
                return self._family(project, path["family"])
            if api_method == "machineTypes.get":
                return self._machine_type(project, zone, path["machineType"])
            if api_method == "acceleratorTypes.get":
                return self._accelerator_type(project, zone, path["acceleratorType"])
            if api_method == "regions.get":
                return self._region(project, path["region"])
            if api_method == "projects.get":
                return {"kind": "compute#project", "name": project,
                        "quotas": self._quotas(project, "")}  # fmt: skip
            if api_method == "networks.get":
                where = f"projects/{project}/global/networks/{path['network']}"
                return dict(_found(self.networks, (project, path["network"]), where))
            region, name = path["region"], path["subnetwork"]
            where = f"projects/{project}/regions/{region}/subnetworks/{name}"
            return dict(_found(self.subnetworks, (project, region, name), where))

    def _image(self, project: str, name: str) -> JsonObject:
        where = f"projects/{project}/global/images/{name}"
        if (project, name) in self.unreadable:
            raise Forbidden("compute.images.get", where)
        return dict(_found(self.images, (project, name), where))

    def _family(self, project: str, family: str) -> JsonObject:
        members = [
            i for (p, _), i in self.images.items() if p == project and i.get("family") == family
        ]
        if not members:
            raise Missing(f"projects/{project}/global/images/family/{family}")
        return self._image(project, str(members[-1]["name"]))

    def _machine_type(self, project: str, zone: str, name: str) -> JsonObject:
        where = f"projects/{project}/zones/{zone}/machineTypes/{name}"
        if not _MACHINE_TYPE.fullmatch(name) or (zone, name) in self.withheld:
            raise Missing(where)
        cpus = _CPUS.search(name)
        return {"kind": "compute#machineType", "name": name, "zone": zone,
                "guestCpus": int(cpus.group(1)) if cpus else 1,
                "selfLink": API_ROOT + where}  # fmt: skip

    def _accelerator_type(self, project: str, zone: str, name: str) -> JsonObject:
        where = f"projects/{project}/zones/{zone}/acceleratorTypes/{name}"
        if not name.startswith("nvidia-") or (zone, name) in self.withheld:
            raise Missing(where)
        return {
            "kind": "compute#acceleratorType",
            "name": name,
            "zone": f"{API_ROOT}projects/{project}/zones/{zone}",
            "maximumCardsPerInstance": 16 if name == "nvidia-tesla-a100" else 8,
            "selfLink": API_ROOT + where,
        }

    def _region(self, project: str, region: str) -> JsonObject:
        zones = [f"{API_ROOT}projects/{project}/zones/{region}-{z}" for z in "abc"]
        return {"kind": "compute#region", "name": region, "status": "UP", "zones": zones,
                "quotas": self._quotas(project, region),
                "selfLink": f"{API_ROOT}projects/{project}/regions/{region}"}  # fmt: skip

    def _quotas(self, project: str, region: str) -> list[JsonObject]:
        return [
            {"metric": metric, "limit": limit, "usage": usage}
            for (p, r, metric), (limit, usage) in sorted(self.quotas.items())
            if (p, r) == (project, region)
        ]


def _found(table: dict[Any, JsonObject], key: Any, where: str) -> JsonObject:
    if key not in table:
        raise Missing(where)
    return table[key]
