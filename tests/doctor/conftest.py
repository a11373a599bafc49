"""The local GCP servers doctor's tests share: one local Compute, topics API and IAM for
the session, wiped and refilled for each test by ``gcp_project.well_formed``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dynagent.testing.gcp.compute import LocalCompute
from dynagent.testing.gcp.iam import LocalGcpIam
from dynagent.testing.gcp.pubsub_topics import LocalPubSubTopics

from .gcp_project import Project, well_formed

Servers = tuple[LocalCompute, LocalPubSubTopics, LocalGcpIam]


@pytest.fixture(scope="session")
def gcp_servers() -> Iterator[Servers]:
    with LocalCompute() as compute, LocalPubSubTopics() as topics, LocalGcpIam() as iam:
        yield compute, topics, iam


@pytest.fixture
def project(gcp_servers: Servers) -> Project:
    return well_formed(*gcp_servers)
