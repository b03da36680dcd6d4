"""The algorithm's settings make sense: names resolve, coefficients and sampling ranges are
valid. Part of validate.py's checks (one job: rl_config and sampling, not shapes, batches,
roles or the cluster)."""

from __future__ import annotations

from mindrl.config import names
from mindrl.config.errors import Problem
from mindrl.config.schema import RunConfig
from mindrl.config.structure import suggest


def check_sampling(sampling, val_temperature: float) -> list[Problem]:
    """vLLM's sampling ranges, checked before anything starts (vLLM itself would refuse them
    only at the first generate, after Ray, Megatron and the engine are up)."""
    key = "generate_config.sampling_config."
    rules = (("temperature", sampling.temperature >= 0, ">= 0 (0 = greedy)"),
             ("top_p", 0 < sampling.top_p <= 1, "in (0, 1] (1 = off)"),
             ("top_k", sampling.top_k == -1 or sampling.top_k >= 1, "-1 (off) or >= 1"),
             ("min_p", 0 <= sampling.min_p <= 1, "in [0, 1] (0 = off)"),
             ("logprobs", sampling.logprobs >= 0, ">= 0 (0 = the sampled token's only)"))
    out = [Problem(key + name, f"must be {allowed}", f"set {key + name} {allowed}",
                   getattr(sampling, name)) for name, ok, allowed in rules if not ok]
    if val_temperature < 0:
        out.append(Problem("rl_config.val_temperature", "must be >= 0 (0 = greedy)",
                           "set rl_config.val_temperature >= 0", val_temperature))
    return out


def check_algorithm(run: RunConfig) -> list[Problem]:
    """Names resolve to registered pieces; numbers are in range; dtype flags agree."""
    out: list[Problem] = []
    rl, gen = run.rl_config, run.generate_config
    for key, value, known in (("adv_estimator", rl.adv_estimator, names.ADV_ESTIMATORS),
                              ("kl_penalty", rl.kl_penalty, names.KL_PENALTIES),
                              ("loss_agg_mode", rl.loss_agg_mode, names.LOSS_AGG_MODES)):
        if value not in known:
            out.append(Problem(f"rl_config.{key}", "is not a known name",
                               suggest(value, known), value))
    for i, spec in enumerate(rl.verifier_modules):
        try:
            names.load_verifier_module(spec)
        except ValueError as e:
            cause = e.__cause__
            out.append(Problem(f"rl_config.verifier_modules[{i}]", "cannot be loaded ("
                               f"{type(cause).__name__}: {cause})",
                               "give a module importable here (my_pkg.rewards) or a .py file "
                               "(absolute, or relative to the working directory) that "
                               "registers verifiers with mindrl.rewards.register_verifier",
                               spec))
    verifiers = names.known_verifiers()
    for i, name in enumerate(rl.verifier_function):
        if name not in verifiers:
            out.append(Problem(f"rl_config.verifier_function[{i}]", "is not a registered "
                               "verifier", suggest(name, verifiers) + " (a verifier of your "
                               "own: register it with mindrl.rewards.register_verifier in a "
                               "module listed in rl_config.verifier_modules)", name))
    if len(rl.verifier_weight) != len(rl.verifier_function):
        out.append(Problem("rl_config.verifier_weight", f"has {len(rl.verifier_weight)} "
                           f"weight(s) for {len(rl.verifier_function)} verifier(s)",
                           "give one weight per entry of rl_config.verifier_function",
                           rl.verifier_weight))
    if rl.rule_reward and not rl.verifier_function:
        out.append(Problem("rl_config.verifier_function", "is empty while rule_reward=true",
                           f"list verifiers from {list(verifiers)}", []))
    if rl.adv_estimator == "gae":
        out.append(Problem("rl_config.adv_estimator", "gae needs a critic (a value model "
                           "that scores every token), and MindRL has no critic role yet",
                           "use one of the estimators that need no critic: " + ", ".join(
                               n for n in names.ADV_ESTIMATORS if n != "gae"), "gae"))
    if rl.adv_estimator in ("gae", "reinforce_plus_plus") and not 0 < rl.gamma <= 1:
        out.append(Problem("rl_config.gamma", f"must be in (0, 1] for {rl.adv_estimator}",
                           "use 1.0 (no discount) for outcome rewards", rl.gamma))
    out += check_objective(rl)
    out += check_rollout_correction(rl)
    out += check_sampling(gen.sampling_config, rl.val_temperature)
    for key in ("clip_ratio", "clip_ratio_low", "clip_ratio_high", "verifier_timeout"):
        value = getattr(rl, key)
        if value is not None and value <= 0:
            out.append(Problem(f"rl_config.{key}", "must be positive", "use e.g. 0.2", value))
    if not rl.phase_timeout_s > 0:
        out.append(Problem("rl_config.phase_timeout_s", "must be positive (the seconds a phase "
                           "of the step may take before the run stops with a failure report)",
                           "use e.g. 1800", rl.phase_timeout_s))
    for key in ("kl_coef", "entropy_coeff", "entropy_coeff_final", "entropy_decay_steps"):
        if (getattr(rl, key) or 0) < 0:
            out.append(Problem(f"rl_config.{key}", "must not be negative", "use 0 to disable",
                               getattr(rl, key)))
    if (rl.entropy_coeff_final is None) != (rl.entropy_decay_steps == 0):
        out.append(Problem("rl_config.entropy_decay_steps", "and rl_config.entropy_coeff_final "
                           "go together: one is set without the other", "set both (decay from "
                           "entropy_coeff to entropy_coeff_final over entropy_decay_steps "
                           "steps) or neither (a constant entropy_coeff)",
                           rl.entropy_decay_steps))
    if rl.use_wandb and not rl.wandb_project:
        out.append(Problem("rl_config.wandb_project", "is required when use_wandb=true",
                           "name a wandb project", rl.wandb_project))
    if not 0 < gen.gpu_memory_utilization <= 1:
        out.append(Problem("generate_config.gpu_memory_utilization", "must be in (0, 1]",
                           "use e.g. 0.5 when training shares the devices",
                           gen.gpu_memory_utilization))
    return out


def check_objective(rl) -> list[Problem]:
    """The policy loss is a registered one; dual-clip PPO's cap (as verl defines it: a
    negative advantage's loss is capped at -A x clip_ratio_c) bounds the ratio from above
    only when it is > 1."""
    out: list[Problem] = []
    if rl.policy_loss not in names.POLICY_LOSSES:
        out.append(Problem("rl_config.policy_loss", "is not a registered policy loss "
                           f"(registered: {', '.join(names.POLICY_LOSSES)})",
                           suggest(rl.policy_loss, names.POLICY_LOSSES), rl.policy_loss))
    if rl.clip_ratio_c is not None and not rl.clip_ratio_c > 1:
        out.append(Problem("rl_config.clip_ratio_c", "must be > 1 (dual-clip PPO caps the "
                           "loss of a negative advantage at -A x clip_ratio_c) or null (no "
                           "dual clip)", "use e.g. 3.0, or null", rl.clip_ratio_c))
    return out


def check_rollout_correction(rl) -> list[Problem]:
    """Rollout correction and the log-prob drift alarm: a mode the engine knows, a cap that
    truncates, an alarm that can fire; the log-prob chunk is a positive number of tokens."""
    out: list[Problem] = []
    if rl.rollout_is not in names.ROLLOUT_IS_MODES:
        out.append(Problem("rl_config.rollout_is", "is not a known mode",
                           suggest(rl.rollout_is, names.ROLLOUT_IS_MODES), rl.rollout_is))
    if not rl.rollout_is_cap > 1:
        out.append(Problem("rl_config.rollout_is_cap", "must be > 1: the importance weights "
                           "are truncated at it, and a cap <= 1 would shrink every on-policy "
                           "token's weight", "use e.g. 2.0", rl.rollout_is_cap))
    threshold = rl.logprob_drift_threshold
    if threshold is not None and not threshold > 0:
        out.append(Problem("rl_config.logprob_drift_threshold", "must be positive (the "
                           "rollout/logprob_diff_mean above which the drift alarm counts a "
                           "step)", "use e.g. 0.01, or null to turn the alarm off", threshold))
    if rl.logprob_drift_steps < 1:
        out.append(Problem("rl_config.logprob_drift_steps", "must be >= 1 (consecutive steps "
                           "above the threshold before the alarm warns)", "use e.g. 3",
                           rl.logprob_drift_steps))
    if rl.logprob_chunk_tokens < 1:
        out.append(Problem("rl_config.logprob_chunk_tokens", "must be >= 1 (response tokens "
                           "per fp32 log-softmax slab)", "use e.g. 512",
                           rl.logprob_chunk_tokens))
    return out
