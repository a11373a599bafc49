"""``python -m tests.reliability.handler_child EVENT RESULT``: one Lambda invocation of the
reconcile function, alone in this process, measured.

R7 runs this in a child process so that its peak memory is the function's own, as
Lambda's "Max Memory Used" is (the interpreter, the imports, the event and the pass),
and not the local AWS's, which serves it from the parent over HTTP. The environment
configures it as template.yaml configures the function; its log goes to stdout, as
Lambda's does. RESULT gets the response, the invocation's wall and CPU time and the peak RSS.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path


def main(event_path: str, result_path: str) -> None:
    event = json.loads(Path(event_path).read_text())
    began = time.perf_counter()
    import app  # functions/aws/app.py, as Lambda's init phase imports it

    from dynagent.testing.aws.event_source import LambdaContext

    init = time.perf_counter() - began
    began, cpu = time.perf_counter(), time.process_time()
    result: dict[str, object] = {}
    try:
        result["response"] = app.reconcile(event, LambdaContext())
    except Exception as error:  # Lambda would fail the whole batch: reported, not hidden
        result["escaped"] = f"{type(error).__name__}: {str(error)[:500]}"
    result["seconds"] = time.perf_counter() - began
    # Its own work, without the time the local AWS takes to answer (most of the above).
    result["cpu_seconds"] = time.process_time() - cpu
    result["init_seconds"] = init
    result["peak_mib"] = peak_rss_kib() / 1024
    Path(result_path).write_text(json.dumps(result))


def peak_rss_kib() -> float:
    """This process's peak resident memory, as Lambda's "Max Memory Used" counts it.

    Linux's VmHWM, not ``ru_maxrss``: Linux carries ``ru_maxrss`` over an exec from the
    process that forked, so a child of the suite (whose local AWS holds some 240 MiB)
    would report the parent's size, not its own.
    """
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:  # not Linux: ru_maxrss, in KiB, or bytes on macOS
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 1024 if sys.platform == "darwin" else float(peak)
    line = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
    return float(line.split()[1])


if __name__ == "__main__":
    main(*sys.argv[1:3])
