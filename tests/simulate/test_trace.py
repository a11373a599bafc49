"""Reading traces: the ITP form of the shared traces, and the plain form."""

from __future__ import annotations

from pathlib import Path

import pytest

from dynagent.simulate.trace import Job, TraceError, load_trace


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "jobs.csv"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))  # "\udcee": the byte 0xee
    return path


def test_the_itp_form(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "job_id,submission_time,duration,num_gpu\nb,20,600,8\na,10,1200,1\n",
    )
    trace = load_trace(path)
    assert trace.name == "jobs"
    # In arrival order, whatever the file's order.
    assert trace.jobs == (Job("a", 10, 1200, 1), Job("b", 20, 600, 8))
    assert trace.busy_gpu_seconds == 1200 + 8 * 600
    assert (trace.start, trace.end) == (10, 1210)


def test_the_plain_form_names_its_jobs(tmp_path: Path) -> None:
    trace = load_trace(write(tmp_path, "arrival_s,duration_s,gpus\n0,60.4,2\n5,30,1\n"))
    assert trace.jobs == (Job("job-1", 0, 60, 2), Job("job-2", 5, 30, 1))


def test_the_plain_form_may_give_priority_and_single_agent(tmp_path: Path) -> None:
    text = "arrival_s,duration_s,gpus,priority,single_agent\n0,60,8,10,true\n1,60,0,,\n"
    trace = load_trace(write(tmp_path, text))
    assert trace.jobs == (
        Job("job-1", 0, 60, 8, priority=10, single_agent=True),
        Job("job-2", 1, 60, 0, priority=42, single_agent=False),  # Determined's defaults
    )
    # Either column alone, in any order.
    only = load_trace(write(tmp_path, "single_agent,arrival_s,duration_s,gpus\nyes,0,60,1\n"))
    assert only.jobs == (Job("job-1", 0, 60, 1, single_agent=True),)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a,b,c\n1,2,3\n", "unknown columns"),
        ("arrival_s,duration_s,gpus\n", "no jobs"),
        ("arrival_s,duration_s,gpus\n0,soon,1\n", "line 2"),
        ("arrival_s,duration_s,gpus\n0,60,-1\n", "negative number of GPUs"),
        ("arrival_s,duration_s,gpus,priority\n0,60,1,0\n", "not within 1..99"),
        ("arrival_s,duration_s,gpus,priority\n0,60,1,100\n", "not within 1..99"),
        ("arrival_s,duration_s,gpus,single_agent\n0,60,1,maybe\n", "true or false"),
        ("arrival_s,duration_s,gpus,colour\n0,60,1,red\n", "unknown columns"),
        ("job_id,submission_time,duration,num_gpu,priority\na,0,60,1,5\n", "unknown columns"),
        ("arrival_s,duration_s,gpus\n-5,60,1\n", "negative"),
        ("# text\n# period_s,a day\narrival_s,duration_s,gpus\n0,60,1\n", "line 2: period_s"),
        ("# x\narrival_s,duration_s,gpus\n0,soon,1\n", "line 3"),  # the file's own line
        ("\udcee", "not a text CSV"),
    ],
)
def test_a_bad_trace_says_what_is_wrong(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(TraceError, match=message):
        load_trace(write(tmp_path, text))


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read trace"):
        load_trace(tmp_path / "nope.csv")


def test_the_plain_form_may_name_pool_task_type_and_task_id(tmp_path: Path) -> None:
    text = (
        "arrival_s,duration_s,gpus,priority,single_agent,pool,task_type,task_id\n"
        "0,60,2,,false,default,TRIAL,1.abc\n"
        "5,30,1,,true,a100,COMMAND,def\n"
    )
    trace = load_trace(write(tmp_path, text))
    assert trace.jobs == (
        Job("1.abc", 0, 60, 2, pool="default", task_type="TRIAL"),
        Job("def", 5, 30, 1, single_agent=True, pool="a100", task_type="COMMAND"),
    )
    assert trace.pools == ["a100", "default"]
    assert [job.id for job in trace.of_pool("a100").jobs] == ["def"]
    # A trace that names no pools is all of any pool's.
    plain = load_trace(write(tmp_path, "arrival_s,duration_s,gpus\n0,60,1\n"))
    assert (plain.pools, plain.of_pool("a100")) == ([], plain)


def test_the_preamble_records_the_period_as_it_ran(tmp_path: Path) -> None:
    text = (
        "# dynagent trace: the master's records, with a comma, of a day\n"
        "# period_s,86400\n"
        '# agents_up_gpu_hours,"gpu, spot",12.5\n'
        "# agents_up_gpu_hours,default,3\n"
        'arrival_s,duration_s,gpus,pool\n0,60,2,default\n5,30,1,"gpu, spot"\n'
    )
    trace = load_trace(write(tmp_path, text))
    assert [job.id for job in trace.jobs] == ["job-1", "job-2"]  # rows, not file lines
    assert trace.period_s == 86400
    assert trace.agents_up_gpu_hours == {"gpu, spot": 12.5, "default": 3.0}
    # One pool's jobs keep that pool's agents only.
    assert trace.of_pool("default").agents_up_gpu_hours == {"default": 3.0}
    assert trace.of_pool("other").agents_up_gpu_hours == {}
