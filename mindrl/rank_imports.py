"""What every local rank imports, imported once by spawn_local's fork server (torch, and
Megatron on this device's terms) so that each rank forks from it ready instead of importing
them again: about 3-4 s of CPU per rank on a CPU box (mindrl/distributed.py)."""

import gc

from mindrl import device

device.import_megatron()
gc.freeze()    # every rank forks with this heap: its full collections pass over none of it
