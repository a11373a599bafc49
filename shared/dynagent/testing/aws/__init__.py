"""A local AWS: moto's server on loopback (``local_aws``, its EC2 fixes in the modules
beside it), made faithful where dynagent leans on EC2's behaviour, with the account's
limits and offers (``account``), instant EC2 Fleets and scarce capacity (``fleet``), IAM's
evaluation (``iam``), the deployed stack (``stack``) and Lambda's SQS event source
(``event_source``)."""
