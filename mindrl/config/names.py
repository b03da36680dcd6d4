"""Names a recipe may use for pluggable pieces, in one place each.

Verifier names are not listed here: validation reads mindrl/rewards' registry itself
(`known_verifiers`), so a verifier registered with `register_verifier` validates with no
second edit. The algorithm tables and the model families stay hand-kept because
mindrl/algorithms and the family registry import torch, which config must not pull in;
tests keep them equal to the registries. Each family is declared once, in FAMILIES; every
family list config reads is derived from it.
"""

from dataclasses import dataclass

ADV_ESTIMATORS: tuple[str, ...] = ("group_norm", "rloo", "reinforce_plus_plus", "gae")
KL_PENALTIES: tuple[str, ...] = ("kl", "mse", "low_var_kl", "abs")
# agent_config: the tool-call layouts (models/tool_formats.py) and the shipped tools
# (mindrl/tools), names held equal to their registries by tests.
TOOL_FORMATS: tuple[str, ...] = ("qwen25", "qwen3", "char")
SHIPPED_TOOLS: tuple[str, ...] = ("calculator", "python", "search")
LOSS_AGG_MODES: tuple[str, ...] = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean")
ROLLOUT_IS_MODES: tuple[str, ...] = ("off", "token", "sequence")
POLICY_LOSSES: tuple[str, ...] = ("ppo_clip",)
# On-policy distillation (algorithms/distill.py): the losses built, and the per-token
# estimators (KL_ESTIMATORS' names) rl_config.distill_estimator accepts.
DISTILL_LOSSES: tuple[str, ...] = ("reverse_kl",)
DISTILL_ESTIMATORS: tuple[str, ...] = ("k1", "k2", "k3")
# The tokenizers each warm start's documents are written in (models/warm_start.py; echo's
# tool markers are char_tools' only).
WARM_START_TOKENIZERS: dict[str, tuple[str, ...]] = {"echo": ("char_tools",),
                                                     "recall": ("char", "char_tools")}
# The linear layers of a transformer block a LoRA adapter may sit on (models/lora.py).
LORA_TARGETS: tuple[str, ...] = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")


@dataclass(frozen=True)
class FamilyEntry:
    """One registered model family as config sees it (by HF model_type). The family itself
    (model half, tensor table) is mindrl/ckpt/registry.py's, which config cannot import;
    tests/ckpt/test_registry.py holds these entries equal to its families' features."""

    model_type: str
    tiny_model: str          # `+scale_down`'s stand-in, a configs/model file
    vision: bool = False     # vision-language: a spec's `vision.family` names it
    qk_norm: bool = False    # per-head q/k RMSNorms (Features.qk_norm): [head_dim] weights
    experts: bool = False    # Mixture-of-Experts (Features.experts): a spec's `moe:` block


# In the registry's order. A family's tiny model need not be its own (Llama's is tiny-qwen2).
FAMILIES: tuple[FamilyEntry, ...] = (
    FamilyEntry("qwen2", "tiny-qwen2"),
    FamilyEntry("llama", "tiny-qwen2"),
    FamilyEntry("qwen2_5_vl", "tiny-qwen25vl", vision=True),
    FamilyEntry("qwen3", "tiny-qwen3", qk_norm=True),
    FamilyEntry("qwen3_moe", "tiny-qwen3-moe", qk_norm=True, experts=True),
)
# Decoder families a spec's `architecture` may name; vision-language ones its `vision.family`.
ARCHITECTURES: tuple[str, ...] = tuple(f.model_type for f in FAMILIES if not f.vision)
VISION_FAMILIES: tuple[str, ...] = tuple(f.model_type for f in FAMILIES if f.vision)
# q/k norms count in ModelSpec.num_parameters; MoE specs carry a `moe:` block.
QK_NORM_ARCHITECTURES: tuple[str, ...] = tuple(f.model_type for f in FAMILIES if f.qk_norm)
MOE_ARCHITECTURES: tuple[str, ...] = tuple(f.model_type for f in FAMILIES if f.experts)
# A family -> the tiny model `+scale_down` runs in its place (config/scale_down.py).
TINY_MODELS: dict[str, str] = {f.model_type: f.tiny_model for f in FAMILIES}

ROLES: tuple[str, ...] = ("actor", "ref", "reward", "teacher")
ROLE_SECTIONS = {"actor": "actor_config", "ref": "ref_config", "reward": "reward_config",
                 "teacher": "teacher_config"}
ROLE_RESOURCES = {"actor": "actor_resource", "ref": "reference_resource",
                  "reward": "reward_resource", "teacher": "teacher_resource"}


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
