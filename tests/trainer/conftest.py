"""One work directory (MINDRL_WORK_DIR) for every training run of the trainer tests.

`prepare` makes the tiny model, its Megatron conversion and the task files on a run's first use
and leaves existing ones alone; they depend on `prepare`'s own seed, never on the run's, and runs
only read them. So the first run makes them (about 15 s) and every later run, in any module,
reuses them; each test keeps its own run directory.
"""

import pytest


@pytest.fixture(scope="session")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("work")
