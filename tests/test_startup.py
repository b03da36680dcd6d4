"""A process that defers full collections while it starts runs none of them through the import
of torch, and once started collects as before with its start-up objects frozen; a process that
never deferred is left alone by `started`."""

import json
import subprocess
import sys

CHILD = r"""
import gc, json, sys
from mindrl import startup
full = []
gc.callbacks.append(lambda phase, info: full.append(1)
                    if phase == "start" and info["generation"] == 2 else None)
before = gc.get_threshold()
startup.started()                                   # never deferred: nothing changes
untouched = (gc.get_threshold() == before and gc.get_freeze_count() == 0)
startup.defer_full_collections()
deferred = gc.get_threshold()
import torch                                        # ~200k objects: several full passes
full_during = len(full)
startup.started()
print(json.dumps({"untouched": untouched, "before": before, "deferred": deferred,
                  "full_during": full_during, "after": gc.get_threshold(),
                  "frozen": gc.get_freeze_count()}))
"""


def test_no_full_collection_while_starting_and_the_start_frozen_after():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert got["untouched"]
    assert got["deferred"][:2] == got["before"][:2] and got["deferred"][2] > 10**9
    assert got["full_during"] == 0
    assert got["after"] == got["before"]
    assert got["frozen"] > 100_000


def test_without_deferring_the_same_import_runs_full_collections():
    """The control: what the deferral saves is real on this Python."""
    child = CHILD.replace("startup.defer_full_collections()", "pass")
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert json.loads(out.strip().splitlines()[-1])["full_during"] >= 1
