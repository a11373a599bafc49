"""The files dynagent reads and writes beside the core's models: a pool config with the
environment's defaults (``config``), a snapshot (``snapshot``), the pools packed into a
deployment (``packed``), the master's resource_pools (``master_config``), and how a
command line names the pools file (``config_argument``)."""
