"""What a pass tells the admin: the metrics' catalog (``metrics``), one pass's figures
(``pass_metrics``) and the status summary kept on the fleet (``status``)."""
