"""``dynagent bridge``: a stock Determined master's state, as pool snapshots.

It runs next to the master and talks to it alone (``client``): it reads agents,
resource pools, allocations and the job queue (``reading``), drains idle agents through
the master before the functions may terminate them (``drain``), and publishes one
snapshot per managed pool on every change, when an agent's idle period runs out
(``idle``) and at least every 30 s (``loop``).
"""
