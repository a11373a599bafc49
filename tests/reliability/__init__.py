"""The reliability suite: load and faults against the local clouds, as figures.

Each scenario drives the real functions (handlers, providers, the decision) against the
local AWS over HTTP or the local Compute Engine and the Pub/Sub emulator, injects its
faults at the double, and reports one row of ``Figures``. ``make reliability`` prints
the table (``python -m tests.reliability``); ``make test`` runs the short form
(tests/reliability/test_reliability.py); ``make bench`` the long form.
"""
