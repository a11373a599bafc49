"""A local Determined master that answers and decides as a stock 0.38 master does
(``master``): its config as the master reads it (``master_config``), its admission
(``admission``), its CLI run against it (``det_cli``), the pools dynagent scales
(``scaled_pools``) and HTTPS (``tls``)."""
