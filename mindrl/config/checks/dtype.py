"""bf16 only where the devices compute in it. Part of validate.py's checks (one job: the dtype
keys against the cluster's bf16 capability, ClusterResources.bf16).

Machines of one size differ: an AVX-512 bf16 CPU trains a bf16 recipe, an AVX2-only one would
run its bf16 matmuls 8-40x slower than fp32 (docs/platforms.md#bf16), an older GPU would
emulate them. Such a recipe is refused before anything starts, naming the key that asks for
bf16 and the fp32 fallback. The cluster says what it can do (device.bf16_supported(), filled in by
local_cluster()); a cluster whose capability is unknown (None: a Ray cluster's nodes) is not
checked.
"""

from __future__ import annotations

from mindrl.config import names
from mindrl.config.cluster import ClusterResources
from mindrl.config.errors import CLUSTER, Problem
from mindrl.config.schema import RunConfig


def _no_bf16(cluster: ClusterResources) -> str:
    return (f"this cluster's {cluster.device_type} devices do not compute in bfloat16 "
            f"({cluster.describe()})")


def check_bf16(run: RunConfig, cluster: ClusterResources) -> list[Problem]:
    """One problem per key that puts a role in bf16 (megatron_training.bf16 covers every role
    that inherits it), and one for vLLM's generate_config.dtype where the device runs vLLM in
    the recipe's dtype (on CPU vLLM follows the actor: config/cpu_notice.py)."""
    if cluster.bf16 is not False:
        return []
    roles_by_key: dict[str, list[str]] = {}
    for role in run.active_roles:
        if run.role(role).bf16:
            roles_by_key.setdefault(names.role_key(run, role, "bf16"), []).append(role)
    out = [Problem(key, f"puts the {' and '.join(roles)} in bfloat16, but {_no_bf16(cluster)}",
                   f"set {key}: false: the {' and '.join(roles)} then train"
                   f"{'s' if len(roles) == 1 else ''} in fp32", True, CLUSTER)
           for key, roles in roles_by_key.items()]
    dtype = run.generate_config.dtype
    # On CPU vLLM is in bf16 only beside a bf16 actor, whose key is refused above.
    if dtype == "bfloat16" and cluster.device_type != "cpu":
        out.append(Problem("generate_config.dtype", f"runs the rollout engines in bfloat16, "
                           f"but {_no_bf16(cluster)}", "set generate_config.dtype: float32 "
                           "(or float16)", dtype, CLUSTER))
    return out
