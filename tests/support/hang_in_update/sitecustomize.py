"""Test hook: in Ray worker processes only, MINDRL_TEST_HANG_UPDATE="ROLE:RANK:CALL" makes
that rank's update hang for ever from its CALL-th update on (1 = the first), as a rank stuck
in a collective or a bad kernel would. Put this directory on PYTHONPATH."""

import os
import sys

_spec = os.environ.get("MINDRL_TEST_HANG_UPDATE")
if _spec and any(arg.endswith("default_worker.py") for arg in sys.argv):
    import time

    from mindrl.workers import megatron_worker

    _role, _rank, _call = _spec.split(":")
    _original = megatron_worker.MegatronWorker.update
    _calls = {"n": 0}

    def hang_in_update_for_the_test():
        while True:
            time.sleep(1)

    def _update(self, *args, **kwargs):
        _calls["n"] += 1
        if self.role == _role and self.rank == int(_rank) and _calls["n"] >= int(_call):
            hang_in_update_for_the_test()
        return _original(self, *args, **kwargs)

    megatron_worker.MegatronWorker.update = _update
