"""Acting on a plan: the interface each cloud's adapter implements (``provider``), one
reconcile pass (``reconcile``), and the launch-time rules that need the cloud's answer
(``fallback`` across offerings, ``repack`` after a refusal, ``launch_errors``' pause).
"""
