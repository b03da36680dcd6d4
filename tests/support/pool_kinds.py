"""A job kind of the shared worker pool (mindrl/rewards/pool.py) for the concurrency tests,
imported by module name in the workers (tests/ is on sys.path; workers inherit it). Trusted
test code, never model-written.

Jobs are (what, seconds): "nap" sleeps that long and answers it, "hang" never answers,
"exit" kills its worker after that long, "gated" naps holding a semaphore of one (the kind's
`run.gate`).
"""

import os
import threading
import time

from mindrl.rewards.pool import OK

KIND = "support.pool_kinds:setup"


def setup():
    one_at_a_time = threading.BoundedSemaphore(1)

    def run(job):
        what, seconds = job
        if what == "hang":
            while True:
                time.sleep(3600)
        if what == "exit":
            time.sleep(seconds)
            os._exit(3)
        time.sleep(seconds)
        return OK, seconds, ""

    run.gate = lambda job: one_at_a_time if job[0] == "gated" else None
    return run
