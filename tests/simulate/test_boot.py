"""Boots: larger machines register later, each launch jittered, the same seed repeats, and
runs compared draw alike for the launches they make alike."""

from __future__ import annotations

from dynagent.simulate.boot import UNIFORM, BootModel
from dynagent.simulate.run import RunOptions

from .builders import mixed_pool, run, trace


def test_each_gpu_past_the_first_adds_to_the_registration() -> None:
    sampler = BootModel(jitter=0).sampler()
    assert [sampler.draw(slots, 0) for slots in (1, 4, 8)] == [(60, 360), (60, 369), (60, 381)]
    assert UNIFORM.sampler().draw(8, 0) == (60, 180)


def test_jitter_spreads_each_launch_and_the_seed_repeats_it() -> None:
    def draws(seed: int) -> list[tuple[int, int]]:
        sampler = BootModel(seed=seed).sampler()
        return [sampler.draw(8, second) for second in range(50)]

    first = draws(1)
    assert first == draws(1) and first != draws(2)
    assert all(40 <= running <= 80 and 361 <= registered <= 401 for running, registered in first)
    assert len({registered for _, registered in first}) > 10


def test_a_launch_draws_by_its_second_and_place_not_by_the_draws_before_it() -> None:
    # Common random numbers: the run that launched 3 machines more at second 5 boots
    # its launches at seconds 10 and 15 as the run that did not.
    model = BootModel(seed=4)
    plain, busier = model.sampler(), model.sampler()
    for _ in range(3):
        busier.draw(8, 5)
    for sampler in (plain, busier):
        sampler.draw_start(8, 10)
    first = [plain.draw(8, 10), plain.draw(8, 10), plain.draw(8, 15)]
    assert first == [busier.draw(8, 10), busier.draw(8, 10), busier.draw(8, 15)]
    # The second launch of a second is a draw of its own; a start draws apart from launches.
    assert len(set(first)) == 3
    assert model.sampler().draw_start(8, 10) != model.sampler().draw(8, 10)


def test_the_machines_of_one_pass_register_apart() -> None:
    # One pass launches a p3.2xlarge, a p3.8xlarge and two p3.16xlarge (as in
    # test_mixed_fleet); by default their agents come at four different seconds, the
    # larger ones later on average; the uniform model brings all four at 180.
    jobs = trace((0, 600, 1), (0, 600, 2), (0, 600, 2), (0, 600, 16))
    staggered = run(jobs, "dynagent", mixed_pool(), RunOptions())
    assert len(set(staggered.waits)) > 1
    assert run(jobs, "dynagent", mixed_pool()).waits == [180] * 4
