"""Names a recipe may use for pluggable pieces, in one place each.

Verifier names are not listed here: validation reads mindrl/rewards' registry itself
(`known_verifiers`), so a verifier registered with `register_verifier` validates with no
second edit. The algorithm tables and the model family names stay hand-kept because
mindrl/algorithms and the family registry import torch, which config must not pull in;
tests keep them equal to the registries.
"""

ADV_ESTIMATORS: tuple[str, ...] = ("group_norm", "rloo", "reinforce_plus_plus", "gae")
KL_PENALTIES: tuple[str, ...] = ("kl", "mse", "low_var_kl", "abs")
LOSS_AGG_MODES: tuple[str, ...] = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean")
ROLLOUT_IS_MODES: tuple[str, ...] = ("off", "token", "sequence")
POLICY_LOSSES: tuple[str, ...] = ("ppo_clip",)

# Registered model families (mindrl/ckpt/registry.py, by HF model_type), which config cannot
# import: decoder families a spec's `architecture` may name, and vision-language families a
# spec's `vision.family` may name. tests/ckpt/test_registry.py keeps them equal to the registry.
ARCHITECTURES: tuple[str, ...] = ("qwen2", "llama", "qwen3", "qwen3_moe")
VISION_FAMILIES: tuple[str, ...] = ("qwen2_5_vl",)
# Decoder families with per-head q/k RMSNorms (Features.qk_norm): their [head_dim] weights
# count in ModelSpec.num_parameters. tests/ckpt/test_qwen3_family.py keeps it equal.
QK_NORM_ARCHITECTURES: tuple[str, ...] = ("qwen3", "qwen3_moe")
# Mixture-of-Experts decoder families (Features.experts): their specs carry a `moe:` block.
MOE_ARCHITECTURES: tuple[str, ...] = ("qwen3_moe",)

ROLES: tuple[str, ...] = ("actor", "ref", "reward")
ROLE_SECTIONS = {"actor": "actor_config", "ref": "ref_config", "reward": "reward_config"}
ROLE_RESOURCES = {"actor": "actor_resource", "ref": "reference_resource",
                  "reward": "reward_resource"}


def role_key(run, role: str, key: str) -> str:
    """Where a role's value came from, as an error names it: the role's own section if it
    overrides, else the shared megatron_training one."""
    if getattr(run.role(role), key) == getattr(run.megatron_training, key):
        return f"megatron_training.{key}"
    return f"{ROLE_SECTIONS[role]}.{key}"


def load_verifier_module(spec: str) -> None:
    """Run a user's verifier module (rl_config.verifier_modules) so its names register;
    ValueError naming it and the cause."""
    from mindrl.rewards.user_modules import load

    load(spec)


def known_verifiers() -> tuple[str, ...]:
    """The verifier registry's names, read at call time. mindrl.rewards imports only the
    standard library (the math checker loads lazily), so it sits below config and importing
    it here stays light."""
    import mindrl.rewards.builtin  # noqa: F401  (registers the built-in verifiers)
    from mindrl.rewards.registry import VERIFIERS

    return tuple(sorted(VERIFIERS))
