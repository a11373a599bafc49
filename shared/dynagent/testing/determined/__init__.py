"""A local Determined master that answers and decides as a stock 0.38 master does
(``master``, which serves ``cluster``: its ``state``, ``scheduler`` and ``launching``,
answering through ``routes``, ``messages``, ``history`` and ``gateway``): its config as the
master reads
it (``master_config``, with ``config_defaults``, ``config_checks``, ``provider_config`` and
``durations``), its admission (``admission``), its CLI run against it (``det_cli``), the
pools dynagent scales (``scaled_pools``) and HTTPS (``tls``)."""
