"""The master model: best fit, gangs on whole idle agents, requeues, what it publishes."""

from __future__ import annotations

from dynagent.simulate.clock import EPOCH, Events, Kind
from dynagent.simulate.master import SimMaster
from dynagent.simulate.policy import Change
from dynagent.simulate.trace import Job


def master_with(*agents: str, slots: int = 8, max_agents: int = 4) -> tuple[SimMaster, Events]:
    events = Events()
    master = SimMaster("gpu", (slots,), max_agents, events)
    for agent_id in agents:
        master.connect(agent_id)
    master.schedule(0)
    master.take_change()
    return master, events


def placed(master: SimMaster) -> dict[str, int]:
    return {agent.id: agent.used for agent in master.agents.values()}


def test_best_fit_fills_the_busiest_agent_that_fits() -> None:
    master, _ = master_with("a", "b")
    master.submit(Job("j1", 0, 60, 6))
    master.schedule(0)
    master.submit(Job("j2", 0, 60, 2))
    master.submit(Job("j3", 0, 60, 4))
    master.schedule(0)
    # j1 on a; j2 fits a's last 2 slots (the fullest that fits); j3 goes to b.
    assert placed(master) == {"a": 8, "b": 4}


def test_a_gang_takes_whole_idle_agents_or_waits() -> None:
    master, _ = master_with("a", "b", "c")
    master.submit(Job("small", 0, 60, 1))
    master.schedule(0)
    master.submit(Job("gang", 0, 60, 24))  # three agents, one of them is busy
    master.schedule(0)
    assert [t.job.id for t in master.queue] == ["gang"]
    assert master.take_change() is Change.DECISION  # a new pending task
    master.connect("d")
    master.schedule(10)
    assert placed(master) == {"a": 1, "b": 8, "c": 8, "d": 8}
    assert master.waits == [0, 10]


def test_a_busy_agent_getting_busier_is_not_a_decision_change() -> None:
    master, _ = master_with("a")
    master.submit(Job("j1", 0, 60, 2))
    master.schedule(0)
    assert master.take_change() is Change.DECISION  # a went from idle to busy
    master.submit(Job("j2", 5, 60, 2))
    master.schedule(5)
    assert master.take_change() is Change.OTHER


def test_a_lost_agent_puts_its_tasks_back_at_the_head_of_the_queue() -> None:
    master, events = master_with("a", "b")
    master.submit(Job("gang", 0, 600, 16))
    master.schedule(0)
    master.submit(Job("late", 1, 60, 8))
    master.schedule(1)
    master.disconnect("a")
    assert [t.job.id for t in master.queue] == ["gang", "late"]
    assert placed(master) == {"b": 0}  # the gang's other agent is free again
    assert master.requeued == 1
    # The first run's end is stale: finishing it changes nothing.
    (kind, (task, run)) = events.pop_due(600)[0]
    assert kind is Kind.JOB_END and task.run == run + 1
    master.finish(task, run)
    assert master.running == 0 and master.busy_slots == 0


def test_the_snapshot_says_what_is_pending_and_who_is_connected() -> None:
    master, _ = master_with("a")
    master.submit(Job("j1", 0, 60, 8))
    master.submit(Job("j2", 0, 60, 4))
    master.schedule(0)
    snapshot = master.snapshot(EPOCH)
    assert [(t.task, t.slots) for t in snapshot.pending] == [("j2", 4)]
    assert [(a.id, a.slots, a.used_slots) for a in snapshot.agents] == [("a", 8, 8)]
    assert (snapshot.seq, snapshot.time) == (1, EPOCH)
