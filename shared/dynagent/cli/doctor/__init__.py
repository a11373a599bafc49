"""``dynagent doctor``: read-only checks of a cloud account before the first launch.

Each check is a function returning findings (``findings.Finding``: what, status, why,
fix), grouped per cloud like the adapters (``doctor.aws``, ``doctor.gcp``); ``command``
only runs them and prints them (``report``).
"""
