"""Replay job traces through the decision core: what a pool would cost, how long tasks wait.

A discrete-event simulation on a virtual clock: a master model queues and places the
trace's jobs, a simulated cloud implements the ``Provider`` contract in memory with a
boot model and per-second billing, and ``dynagent.run.reconcile.reconcile``, the very code
the functions run, decides. Beside it, a replay of Determined's own provisioner on the
same master and cloud, and the physical limit. ``dynagent simulate`` is the front end.
"""

from dynagent.simulate.boot import BootModel
from dynagent.simulate.capacity import Outage, parse_outage
from dynagent.simulate.replay import Prices, Replay, replay
from dynagent.simulate.run import POLICIES, PolicyRun, RunOptions, simulate
from dynagent.simulate.trace import Job, Trace, TraceError, load_trace

__all__ = [
    "POLICIES",
    "BootModel",
    "Job",
    "Outage",
    "PolicyRun",
    "Prices",
    "Replay",
    "RunOptions",
    "Trace",
    "TraceError",
    "load_trace",
    "parse_outage",
    "replay",
    "simulate",
]
