"""Names a recipe may use for pluggable pieces, in one place each.

The algorithms and rewards packages own the real registries; they may replace these
tuples at import (config sits below them and must not import them), and validation reads
the current value at call time.
"""

KNOWN_VERIFIERS: tuple[str, ...] = (
    "base_acc", "strict_format", "format", "acc", "countdown", "arith")
ADV_ESTIMATORS: tuple[str, ...] = ("group_norm", "rloo", "reinforce_plus_plus", "gae")
KL_PENALTIES: tuple[str, ...] = ("kl", "mse", "low_var_kl", "abs")
LOSS_AGG_MODES: tuple[str, ...] = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean")

ROLES: tuple[str, ...] = ("actor", "ref", "reward")
ROLE_SECTIONS = {"actor": "actor_config", "ref": "ref_config", "reward": "reward_config"}
ROLE_RESOURCES = {"actor": "actor_resource", "ref": "reference_resource",
                  "reward": "reward_resource"}
