"""The master.yaml fragment the tests of the local master read: one EC2 pool of
p4d.24xlarge as ``dynagent master-config`` writes it (a provider for the slot counts
whose region fails aws-sdk-go's check, so its provisioner never acts), as text, so a
test can edit it the way an admin edits master.yaml."""

FRAGMENT = """\
resource_pools:
  - pool_name: a100
    provider:
      type: aws
      region: scaled by dynagent
      image_id: none
      ssh_key_name: none
      instance_type: p4d.24xlarge
      max_instances: 4
"""
