"""Ray's worker_process_setup_hook for a run (trainer/launch.py): every Ray worker process of
the run (ranks, rollout engines, the run's small tasks) defers full garbage collections until
it is built (mindrl/startup.py; MegatronWorker.setup and VLLMEngine end it) and registers its
stack dump for failure reports (workers/stack_dump.py)."""

from mindrl import startup
from mindrl.workers import stack_dump


def setup() -> None:
    startup.defer_full_collections()
    stack_dump.install()
