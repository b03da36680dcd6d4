"""One phase's answers gathered under a deadline (rl_config.phase_timeout_s), and where the
members that give them run.

Both kinds of group (a role's ranks, the rollout engines) gather here: answers come back in
the order they finish, the caller sees a failure at once (its peers may be stuck in a
collective waiting for the failed member, so waiting for all would hang), and once the
deadline has passed PhaseTimeout names every member still running the phase. A member is
{"who": label, "pid": pid or None, "node": Ray node id or None}, labelled as the errors name
it, so a failure report can say on which node each late or dead member ran.
"""

from __future__ import annotations

import time
from typing import Any, Dict, Iterator, List, Optional

from mindrl.errors import PhaseTimeout


def answers(refs: Dict[Any, str], what: str, timeout_s: Optional[float]) -> Iterator[Any]:
    """Each ref of `refs` (ref -> member label) as it finishes; PhaseTimeout naming the
    members whose refs are still pending `timeout_s` after the call (None: no deadline)."""
    import ray

    pending, start = list(refs), time.monotonic()
    while pending:
        left = None if timeout_s is None else max(0.0, timeout_s - (time.monotonic() - start))
        ready, pending = ray.wait(pending, num_returns=1, timeout=left)
        if not ready:
            late = [refs[r] for r in pending]
            raise PhaseTimeout(f"{', '.join(late)}: no answer to {what} within {timeout_s:g} s "
                               f"(rl_config.phase_timeout_s)", what, late, timeout_s)
        yield ready[0]


def bundle_nodes(placement_group, bundles: List[int]) -> List[Optional[str]]:
    """The Ray node id each bundle of the placement group was placed on (None if unknown);
    read from Ray's control store, so it works while the member on it hangs or is gone."""
    import ray

    try:
        table = ray.util.placement_group_table(placement_group)["bundles_to_node_id"]
    except Exception:
        return [None] * len(bundles)
    return [table.get(b) for b in bundles]


def member(who: str, pid: Optional[int], node: Optional[str]) -> Dict[str, Any]:
    return {"who": who, "pid": pid, "node": node}
