"""Determined's own master.yaml files load unchanged, with Determined's slot counts.

Each config here is written from the fields Determined's deploy tools and docs use
(harness/determined/deploy/aws/injector/master.yaml.tmpl with the CloudFormation
parameters' defaults; harness/determined/deploy/gcp/terraform/master.yaml.tmpl with the
terraform variables' defaults; the docs' resource pool examples; the old ``provisioner:``
form), rendered as their templates render them. Then one test per rule of
provconfig's ``Validate`` methods: refused naming the pool and field, or accepted with a
warning where dynagent deliberately accepts more.
"""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest
import yaml

from dynagent.cli.main import describe_config
from dynagent.core.config import AwsProvider, Config, ConfigError, GcpProvider, parse_config
from dynagent.core.pools.aws import DEFAULT_IMAGE_IDS
from tests.builders import IMAGE_ID

AWS_ENV = {"AWS_REGION": "us-west-2"}
GCP_ENV = {"DYNAGENT_GCP_PROJECT": "det-project", "DYNAGENT_GCP_ZONE": "us-west1-b"}

# What ``det deploy aws`` (simple-rds, every parameter at its default) writes: the
# template's two pools, each with the stack's shared provider fields (toYaml sorts them;
# an empty parameter renders as null, an empty quoted one as "").
_DEPLOY_AWS_PROVIDER = """\
      agent_config_file_contents: null
      agent_docker_image: determinedai/determined-agent:0.38.0
      agent_reconnect_attempts: 5
      agent_reconnect_backoff: 5
      custom_tags: []
      iam_instance_profile_arn: arn:aws:iam::123456789012:instance-profile/det-agent
      image_id: ami-015aabd7d10854b76
      instance_name: determined-agent-det-stack
      log_group: /determined/det-stack
      log_stream: determined-agent
      master_cert_name: null
      master_url: http://local-ipv4:8080
      max_agent_starting_period: 20m
      max_idle_agent_period: 10m
      max_instances: 5
      min_instances: 0
      network_interface:
        public_ip: true
        security_group_id: sg-0123456789abcdef0
        subnet_id: subnet-0123456789abcdef0
      root_volume_size: 200
      spot: false
      spot_max_price: ""
      ssh_key_name: det-keypair
      startup_script: |
        if [ ! -z "" ] && [ ! -z ]; then
          echo "" | docker login --username "" --password-stdin
        fi
      tag_key: det-det-stack
      tag_value: det-agent-det-stack
      type: aws
"""
DEPLOY_AWS = f"""\
checkpoint_storage:
  type: s3
  bucket: det-stack-checkpoints
  save_experiment_best: 0
  save_trial_best: 1
  save_trial_latest: 1

db:
  user: postgres
  password: "postgres"
  host: "det-stack-db.abc.us-west-2.rds.amazonaws.com"
  port: 5432
  name: "determined"
  ssl_mode: verify-ca
  ssl_root_cert: "/etc/determined/db_ssl_root_cert.pem"

enable_cors: false

resource_manager:
  type: agent
  default_aux_resource_pool: aux-pool
  default_compute_resource_pool: compute-pool
  scheduler:
    type: fair_share

resource_pools:
  - pool_name: aux-pool
    max_aux_containers_per_agent: 16
    agent_reattach_enabled: false
    provider:
      instance_type: m5.xlarge
{_DEPLOY_AWS_PROVIDER}
  - pool_name: compute-pool
    max_aux_containers_per_agent: 0
    agent_reattach_enabled: false
    provider:
      instance_type: g4dn.metal
      cpu_slots_allowed: true
{_DEPLOY_AWS_PROVIDER}

security:
  initial_user_password: hunter2
"""

# What ``det deploy gcp`` writes with its terraform variables' defaults (cluster id
# "mycluster", version 0.38.0): the master learns project and zone from its metadata.
_DEPLOY_GCP_PROVIDER = """\
      agent_docker_image: determinedai/determined-agent:0.38.0
      agent_docker_network: host
      base_config:
        minCpuPlatform: Intel Broadwell
      boot_disk_size: 200
      boot_disk_source_image: projects/determined-ai/global/images/det-environments-0736b6d
      boot_disk_type: projects/determined-ai/zones/us-west1-b/diskTypes/pd-standard
      label_key: managed-by
      label_value: det-master-mycluster-0-38-0
      labels: {}
      master_url: http://internal-ip:8080
      max_agent_starting_period: 10m
      max_idle_agent_period: 10m
      max_instances: 5
      min_instances: 0
      name_prefix: det-dynamic-agent-mycluster-0-38-0-
      network_interface:
        external_ip: true
        network: projects/det-project/global/networks/det-net-mycluster
        subnetwork: projects/det-project/regions/us-west1/subnetworks/det-subnet-mycluster
      network_tags:
      - det-mycluster-allow-internal
      - det-mycluster-allow-ssh
      operation_timeout_period: 5m
      service_account:
        email: det-mycluster@det-project.iam.gserviceaccount.com
        scopes:
        - https://www.googleapis.com/auth/cloud-platform
      type: gcp
      use_cloud_logging: true
"""
DEPLOY_GCP = f"""\
checkpoint_storage:
  type: gcs
  bucket: det-mycluster-checkpoints
  save_experiment_best: 0
  save_trial_best: 1
  save_trial_latest: 1

db:
  user: "postgres"
  password: "postgres"
  host: "10.1.2.3"
  port: 5432
  name: "determined"
  ssl_mode: "disable"
  ssl_root_cert: ""

resource_manager:
  type: agent
  default_aux_resource_pool: aux-pool
  default_compute_resource_pool: compute-pool
  scheduler:
    type: fair_share

resource_pools:
  - pool_name: aux-pool
    max_aux_containers_per_agent: 100
    provider:
      instance_type:
        gpu_num: 0
        gpu_type: nvidia-tesla-t4
        machine_type: n1-standard-4
        preemptible: false
{_DEPLOY_GCP_PROVIDER}
  - pool_name: compute-pool
    max_aux_containers_per_agent: 0
    provider:
      instance_type:
        gpu_num: 4
        gpu_type: nvidia-tesla-t4
        machine_type: n1-standard-32
        preemptible: false
      cpu_slots_allowed: true
{_DEPLOY_GCP_PROVIDER}

security:
    initial_user_password: "hunter2"
"""


def load(text: str, environ: dict[str, str] | None = None) -> Config:
    return parse_config(text, source="master.yaml", environ=environ or {})


def aws_of(config: Config, pool: str) -> AwsProvider:
    provider = config.pool(pool).provider
    assert isinstance(provider, AwsProvider)
    return provider


def gcp_of(config: Config, pool: str) -> GcpProvider:
    provider = config.pool(pool).provider
    assert isinstance(provider, GcpProvider)
    return provider


def test_det_deploy_aws_loads_with_determined_slot_counts() -> None:
    config = load(DEPLOY_AWS, AWS_ENV)

    aux, compute = aws_of(config, "aux-pool"), aws_of(config, "compute-pool")
    assert aux.slots_per_instance == 0, "m5.xlarge: a zero-slot aux pool"
    assert compute.slots_per_instance == 8, "g4dn.metal"
    assert aux.region == "us-west-2", "from AWS_REGION, as the master reads its own"
    assert aux.master_cert_name == "", "null is unset"
    assert aux.spot_max_price is None, "an empty price is unset (Determined's OnDemand)"
    assert aux.master_url == "http://local-ipv4:8080"
    assert aux.max_idle_agent_period == timedelta(minutes=10)
    assert (aux.tag_key, aux.tag_value) == ("det-det-stack", "det-agent-det-stack")
    assert aux.log_group == "/determined/det-stack"
    assert aux.custom_tags == ()
    assert aux.warnings() == []


def test_det_deploy_gcp_loads_with_project_and_zone_from_the_deployment() -> None:
    config = load(DEPLOY_GCP, GCP_ENV)

    aux, compute = gcp_of(config, "aux-pool"), gcp_of(config, "compute-pool")
    assert aux.slots_per_instance == 0
    assert compute.slots_per_instance == 4
    assert (aux.project, aux.zone) == ("det-project", "us-west1-b")
    assert aux.boot_disk_type.endswith("/pd-standard")
    assert aux.labels == {}
    assert aux.use_cloud_logging is True
    assert aux.name_prefix == "det-dynamic-agent-mycluster-0-38-0-"
    assert compute.warnings() == []


def test_google_cloud_project_is_the_fallback_project() -> None:
    config = load(DEPLOY_GCP, {"GOOGLE_CLOUD_PROJECT": "fn-project", "DYNAGENT_GCP_ZONE": "a-b1-c"})
    assert gcp_of(config, "aux-pool").project == "fn-project"


@pytest.mark.parametrize(
    ("environ", "fragments"),
    [
        ({}, ["provider.project", "DYNAGENT_GCP_PROJECT or GOOGLE_CLOUD_PROJECT"]),
        ({"DYNAGENT_GCP_PROJECT": "p"}, ["provider.zone", "DYNAGENT_GCP_ZONE"]),
    ],
    ids=["project", "zone"],
)
def test_gcp_location_without_environment_names_field_and_variables(
    environ: dict[str, str], fragments: list[str]
) -> None:
    with pytest.raises(ConfigError) as raised:
        load(DEPLOY_GCP, environ)
    for fragment in ["pool 'aux-pool'", "required", *fragments]:
        assert fragment in str(raised.value)


def test_aws_region_falls_back_to_aws_default_region() -> None:
    config = load(DEPLOY_AWS, {"AWS_DEFAULT_REGION": "eu-west-1"})
    assert aws_of(config, "aux-pool").region == "eu-west-1"


# The docs' pools (setup-cluster/aws/aws-spot.rst, install-on-aws.rst): no region, and
# the spot one without image_id either.
DOCS_AWS = """
resource_pools:
  - pool_name: aws-spot-g4dn-metal
    provider:
      type: aws
      max_instances: 10
      instance_type: g4dn.metal
      spot: true
  - pool_name: default
    description: The default resource pool
    provider:
      iam_instance_profile_arn: arn:aws:iam::123456789012:instance-profile/det-agent
      image_id: ami-0123456789abcdef0
      agent_docker_image: determinedai/determined-agent:0.38.0
      instance_name: determined-agent-alice
      instance_type: p3.8xlarge
      master_url: http://local-ipv4:8080
      max_idle_agent_period: 10m
      max_instances: 5
      network_interface:
        public_ip: true
        security_group_id: sg-0123456789abcdef0
      type: aws
      ssh_key_name: alice-key
      tag_key: determined-alice
      tag_value: determined-alice-agent
"""


def test_docs_aws_pools_load_with_determined_defaults() -> None:
    config = load(DOCS_AWS, {"AWS_DEFAULT_REGION": "us-east-1"})

    spot = aws_of(config, "aws-spot-g4dn-metal")
    assert spot.image_id == DEFAULT_IMAGE_IDS["us-east-1"], "Determined's AMI for the region"
    assert spot.slots_per_instance == 8
    assert spot.spot is True
    assert aws_of(config, "default").slots_per_instance == 4
    assert aws_of(config, "default").image_id == IMAGE_ID


def test_a_region_without_a_default_ami_needs_image_id() -> None:
    with pytest.raises(ConfigError) as raised:
        load(DOCS_AWS, {"AWS_REGION": "sa-east-1"})
    message = str(raised.value)
    for fragment in ["pool 'aws-spot-g4dn-metal'", "image_id", "sa-east-1"]:
        assert fragment in message


# The docs' "attach a disk to each dynamic agent" provider, in a pool.
DOCS_GCP_DISK = """
resource_pools:
  - pool_name: with-disk
    provider:
      startup_script: |
                      lsblk
                      mkdir -p /mnt/disks/second
                      mount -o discard,defaults /dev/sdb1 /mnt/disks/second
      type: gcp
      base_config:
        disks:
          - mode: READ_ONLY
            boot: false
            source: zones/us-west1-b/disks/dataset
            autoDelete: false
      boot_disk_size: 200
      boot_disk_source_image: projects/det-project/global/images/agent-image
"""


def test_docs_gcp_attach_a_disk_loads_with_determined_defaults() -> None:
    provider = gcp_of(load(DOCS_GCP_DISK, GCP_ENV), "with-disk")

    assert provider.base_config["disks"][0]["source"] == "zones/us-west1-b/disks/dataset"
    assert provider.slots_per_instance == 4, "n1-standard-32 with 4 T4s"
    assert provider.boot_disk_type == "pd-standard"
    assert provider.label_key == "managed-by"


def test_legacy_provisioner_form_loads_as_pool_default() -> None:
    config = load(
        """
scheduler:
  fit: best
provisioner:
  provider: aws
  instance_type: t3.large
  cpu_slots_allowed: true
  ssh_key_name: ops
""",
        AWS_ENV,
    )

    provider = aws_of(config, "default")
    assert provider.slots_per_instance == 1, "a 0-GPU type with cpu_slots_allowed"
    assert provider.image_id == DEFAULT_IMAGE_IDS["us-west-2"]


def test_every_determined_top_level_key_is_tolerated() -> None:
    keys = [
        "config_file", "log", "db", "tensorboard_timeout", "notebook_timeout", "security",
        "checkpoint_storage", "task_container_defaults", "port", "root", "telemetry",
        "enable_cors", "launch_error", "cluster_name", "ui_customization", "logging",
        "retention_policy", "observability", "cache", "webhooks", "feature_switches",
        "reserved_ports", "__internal", "scim", "saml", "oidc", "det_cloud", "integrations",
        "resource_manager", "additional_resource_managers",
    ]  # fmt: skip
    document = yaml.safe_load(DOCS_AWS)
    for key in keys:
        document[key] = {"anything": {"nested": [1, "x"]}}

    assert set(load(yaml.safe_dump(document), AWS_ENV).pools) == {
        "aws-spot-g4dn-metal",
        "default",
    }


def test_validate_lists_ignored_fields_and_warnings_per_pool() -> None:
    document = yaml.safe_load(DOCS_AWS)
    document["resource_pools"][1]["provider"].update(
        launch_error_timeout="5m", launch_error_retries=2, agent_fluent_image="fluent/x"
    )
    document["resource_pools"].append({"pool_name": "racks", "description": "static agents"})
    document["resource_pools"].append({"pool_name": "slurm", "provider": {"type": "hpc"}})
    lines = describe_config(load(yaml.safe_dump(document), AWS_ENV))

    text = "\n".join(lines)
    # Honoured (dynagent.run.launch_errors), so not listed as ignored.
    assert "launch_error_timeout" not in text and "launch_error_retries" not in text
    assert "warning: agent_fluent_image is ignored" in text
    assert "ssh_key_name is not set" in text, "the spot pool has no key"
    assert "pool racks: not autoscaled (no aws or gcp provider), left to the master" in lines
    assert "pool slurm: not autoscaled (no aws or gcp provider), left to the master" in lines


# --- Determined's validation rules, one by one -------------------------------------

POOL: dict[str, Any] = {
    "pool_name": "gpu",
    "provider": {"type": "aws", "region": "us-east-1", "image_id": IMAGE_ID, "ssh_key_name": "k"},
}
GCP_POOL: dict[str, Any] = {
    "pool_name": "t4",
    "provider": {"type": "gcp", "project": "p", "zone": "us-west1-b"},
}


def aws_pool(**fields: Any) -> str:
    pool = copy.deepcopy(POOL)
    pool["provider"].update(fields)
    return yaml.safe_dump({"resource_pools": [pool]})


def gcp_pool(**fields: Any) -> str:
    pool = copy.deepcopy(GCP_POOL)
    pool["provider"].update(fields)
    return yaml.safe_dump({"resource_pools": [pool]})


REFUSED = [
    pytest.param(aws_pool(master_url="http://[::1"), ["provider.master_url"], id="url-unparsed"),
    pytest.param(
        aws_pool(master_url="http://master:8080/det"), ["provider.master_url", "path"], id="path"
    ),
    pytest.param(
        aws_pool(master_url="ftp://master:8080"), ["provider.master_url", "http"], id="scheme"
    ),
    pytest.param(
        aws_pool(master_url="master:8080"), ["provider.master_url", "http"], id="no-scheme"
    ),
    pytest.param(aws_pool(agent_docker_image=""), ["provider.agent_docker_image"], id="image"),
    pytest.param(
        aws_pool(max_idle_agent_period="0s"),
        ["provider.max_idle_agent_period", "greater than 0"],
        id="idle-zero",
    ),
    pytest.param(
        aws_pool(max_agent_starting_period="-1m"),
        ["provider.max_agent_starting_period", "greater than 0"],
        id="starting-negative",
    ),
    pytest.param(aws_pool(min_instances=-1), ["provider.min_instances"], id="min-negative"),
    pytest.param(aws_pool(max_instances=-1), ["provider.max_instances"], id="max-negative"),
    pytest.param(
        aws_pool(min_instances=3, max_instances=2), ["max_instances (2)"], id="max-below-min"
    ),
    pytest.param(aws_pool(root_volume_size=99), ["provider.root_volume_size", "100"], id="root"),
    pytest.param(
        aws_pool(spot=True, spot_max_price="1.2.3"), ["provider.spot_max_price"], id="two-points"
    ),
    pytest.param(
        aws_pool(spot=True, spot_max_price="3,50"), ["provider.spot_max_price"], id="non-digit"
    ),
    pytest.param(
        aws_pool(instance_type="z9.huge"), ["instance_slots is required", "z9.huge"], id="slots"
    ),
    pytest.param(
        aws_pool(instance_type="z9.huge", instance_slots=-1),
        ["provider.instance_slots"],
        id="slots-negative",
    ),
    pytest.param(
        gcp_pool(boot_disk_size=50), ["pool 't4'", "provider.boot_disk_size", "100"], id="disk"
    ),
    pytest.param(
        gcp_pool(instance_type={"machine_type": "n1 standard"}),
        ["provider.instance_type", "machine_type"],
        id="machine-type",
    ),
    pytest.param(
        gcp_pool(instance_type={"gpu_type": "nvidia-tesla-x1"}),
        ["provider.instance_type", "gpu_type"],
        id="gpu-type",
    ),
    pytest.param(
        gcp_pool(instance_type={"gpu_type": "nvidia-tesla-t4", "gpu_num": 3}),
        ["provider.instance_type", "gpu_num 3"],
        id="gpu-num",
    ),
    pytest.param(
        gcp_pool(instance_type={"gpu_type": "", "gpu_num": 1}),
        ["provider.instance_type", "gpu_num 1"],
        id="gpu-num-without-type",
    ),
    pytest.param(gcp_pool(labels={"Team": "x"}), ["provider.labels"], id="label-key"),
    pytest.param(
        aws_pool(master_cert="not a pem"), ["provider.master_cert", "PEM"], id="master-cert"
    ),
]


@pytest.mark.parametrize(("text", "fragments"), REFUSED)
def test_determined_rule_refuses_naming_pool_and_field(text: str, fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as raised:
        load(text)
    message = str(raised.value)
    assert message.startswith("master.yaml: pool '")
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


@pytest.mark.parametrize(
    "url",
    [
        "",
        "http://local-ipv4:8080",
        "https://public-ipv4:8443",
        "http://local-hostname",
        "http://public-hostname:8080",
        "http://internal-ip:8080",
        "https://external-ip:8443",
    ],
)
def test_master_url_aliases_and_empty_load(url: str) -> None:
    assert aws_of(load(aws_pool(master_url=url)), "gpu").master_url == url


ACCEPTED_WITH_WARNING = [
    pytest.param(aws_pool(ssh_key_name=None), "ssh_key_name is not set", id="no-ssh-key"),
    pytest.param(aws_pool(max_instances=0), "max_instances is 0", id="max-zero"),
    pytest.param(
        aws_pool(instance_type="g6.xlarge"), "not in Determined's slot table", id="newer-gpu"
    ),
    pytest.param(
        aws_pool(instance_type="p3.8xlarge", instance_slots=2),
        "instance_slots 2 overrides the table's 4",
        id="slots-override",
    ),
    pytest.param(
        gcp_pool(instance_type={"machine_type": "e2-standard-8", "gpu_num": 0}),
        "machine_type e2-standard-8 is not one of Determined's",
        id="machine-family",
    ),
    pytest.param(
        gcp_pool(
            instance_type={
                "machine_type": "a3-highgpu-8g",
                "gpu_type": "nvidia-h100-80gb",
                "gpu_num": 8,
            }
        ),
        "gpu_type nvidia-h100-80gb is not in Determined's GPU table",
        id="gpu-type",
    ),
    pytest.param(
        aws_pool(agent_fluent_image="fluent/x"), "agent_fluent_image is ignored", id="ignored-field"
    ),
]


@pytest.mark.parametrize(("text", "warning"), ACCEPTED_WITH_WARNING)
def test_dynagent_accepts_more_with_a_warning(text: str, warning: str) -> None:
    config = load(text)
    warnings = next(iter(config.pools.values())).provider.warnings()
    assert any(warning in line for line in warnings), warnings


@pytest.mark.parametrize(
    ("fields", "slots"),
    [
        ({"instance_type": "m5.xlarge"}, 0),
        ({"instance_type": "m5.xlarge", "cpu_slots_allowed": True}, 1),
        ({"instance_type": "t2.medium"}, 0),
        ({"instance_type": "m6i.16xlarge", "cpu_slots_allowed": True}, 1),
        ({"instance_type": "p2.16xlarge"}, 16),
        ({"instance_type": "g5.48xlarge"}, 8),
        ({"instance_type": "g4dn.12xlarge", "cpu_slots_allowed": True}, 4),
    ],
)
def test_determined_slot_table(fields: dict[str, Any], slots: int) -> None:
    assert aws_of(load(aws_pool(**fields)), "gpu").slots_per_instance == slots


def test_null_means_unset_everywhere() -> None:
    config = load(
        aws_pool(
            master_cert_name=None,
            custom_tags=None,
            network_interface=None,
            agent_config_file_contents=None,
            max_idle_agent_period=None,
            tag_value="",
            spot_max_price="",
            instance_slots=None,
            log_group=None,
        )
    )
    provider = aws_of(config, "gpu")
    assert provider.master_cert_name == ""
    assert provider.custom_tags == ()
    assert provider.network_interface.public_ip is True
    assert provider.agent_config_file_contents is None
    assert provider.max_idle_agent_period == timedelta(minutes=20)
    assert provider.tag_value == "dynagent"
    assert provider.spot_max_price is None


def test_new_fields_keep_their_types() -> None:
    aws = aws_of(
        load(
            aws_pool(
                agent_config_file_contents={"fluent": {"image": "x"}, "debug": True},
                master_cert="-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
            )
        ),
        "gpu",
    )
    assert aws.agent_config_file_contents == {"fluent": {"image": "x"}, "debug": True}
    assert aws.master_cert.startswith("-----BEGIN CERTIFICATE-----")
    gcp = gcp_of(load(gcp_pool(labels={"team": "ml"}, boot_disk_type="pd-ssd")), "t4")
    assert (gcp.labels, gcp.boot_disk_type, gcp.use_cloud_logging) == (
        {"team": "ml"},
        "pd-ssd",
        False,
    )
