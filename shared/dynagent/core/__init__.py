"""The pure core: what a pool is (``config``, ``pools``), what the master and the cloud
said (``snapshot``, ``fleet``), and the decision (``decide``) that turns them into a
``Plan`` with a reason for each action.

Nothing here reads a file, the clock, the environment or a cloud (tests/test_layout.py
holds it to that): the same inputs give the same plan, in a function, in ``dynagent
plan`` and in the simulator.
"""
