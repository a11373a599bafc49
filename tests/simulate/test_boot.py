"""Boots: larger machines register later, each launch jittered, the same seed repeats."""

from __future__ import annotations

from dynagent.simulate.boot import UNIFORM, BootModel
from dynagent.simulate.run import RunOptions

from .builders import mixed_pool, run, trace


def test_each_gpu_past_the_first_adds_to_the_registration() -> None:
    sampler = BootModel(jitter=0).sampler()
    assert [sampler.draw(slots) for slots in (1, 4, 8)] == [(60, 180), (60, 189), (60, 201)]
    assert UNIFORM.sampler().draw(8) == (60, 180)


def test_jitter_spreads_each_launch_and_the_seed_repeats_it() -> None:
    def draws(seed: int) -> list[tuple[int, int]]:
        sampler = BootModel(seed=seed).sampler()
        return [sampler.draw(8) for _ in range(50)]

    first = draws(1)
    assert first == draws(1) and first != draws(2)
    assert all(40 <= running <= 80 and 181 <= registered <= 221 for running, registered in first)
    assert len({registered for _, registered in first}) > 10


def test_the_machines_of_one_pass_register_apart() -> None:
    # One pass launches a p3.2xlarge, a p3.8xlarge and two p3.16xlarge (as in
    # test_mixed_fleet); by default their agents come at four different seconds, the
    # larger ones later on average; the uniform model brings all four at 180.
    jobs = trace((0, 600, 1), (0, 600, 2), (0, 600, 2), (0, 600, 16))
    staggered = run(jobs, "dynagent", mixed_pool(), RunOptions())
    assert len(set(staggered.waits)) > 1
    assert run(jobs, "dynagent", mixed_pool()).waits == [180] * 4
