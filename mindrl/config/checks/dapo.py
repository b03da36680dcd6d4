"""DAPO's settings: the overlong penalty's range, and MindSpeed-RL's DAPO names checked
against the MindRL keys that do the work.

MindSpeed-RL spells DAPO with switches and copies (clip_higher_enable, rollout_max_tokens,
filter_groups_*); MindRL has one key per setting. A ported recipe validates where the names
agree with MindRL's keys and is refused, naming both keys and the fix, where they would
disagree, so a DAPO recipe never runs something other than what it says. The plain renames
(overlong_buffer, overlong_buffer_penalty_factor, filter_groups_enable) are parse.ALIASES.
"""

from __future__ import annotations

from mindrl.config.errors import Problem
from mindrl.config.schema import RunConfig

# token_level_loss -> the loss_agg_mode it means (MindSpeed-RL: token mean over the batch,
# else each sequence's token mean averaged over sequences).
TOKEN_LEVEL_LOSS = {True: "token-mean", False: "seq-mean-token-mean"}


def check_overlong(run: RunConfig) -> list[Problem]:
    """The penalty's buffer fits in the response limit and needs the rule reward it adds to."""
    rl = run.rl_config
    max_tokens = run.generate_config.sampling_config.max_tokens
    out = []
    if not 0 <= rl.overlong_buffer_len <= max_tokens:
        out.append(Problem("rl_config.overlong_buffer_len", f"must be in 0..generate_config."
                           f"sampling_config.max_tokens={max_tokens} (the penalty ramps over "
                           "the last overlong_buffer_len response tokens)",
                           "use e.g. a quarter of max_tokens, or 0 (off)",
                           rl.overlong_buffer_len))
    if rl.overlong_penalty_factor < 0:
        out.append(Problem("rl_config.overlong_penalty_factor", "must not be negative (the "
                           "penalty at max_tokens is -overlong_penalty_factor)", "use e.g. 1.0",
                           rl.overlong_penalty_factor))
    if rl.overlong_buffer_len and not rl.rule_reward:
        out.append(Problem("rl_config.overlong_buffer_len", "adds to the rule score, and "
                           "rl_config.rule_reward is false", "set rule_reward: true, or "
                           "overlong_buffer_len: 0", rl.overlong_buffer_len))
    return out


def check_dapo_names(run: RunConfig) -> list[Problem]:
    """Each MindSpeed-RL DAPO name set in the recipe agrees with the MindRL key doing its job."""
    rl, mt = run.rl_config, run.megatron_training
    max_tokens = run.generate_config.sampling_config.max_tokens
    out = []
    if rl.token_level_loss is not None and \
            rl.loss_agg_mode != TOKEN_LEVEL_LOSS[rl.token_level_loss]:
        want = TOKEN_LEVEL_LOSS[rl.token_level_loss]
        out.append(Problem("rl_config.token_level_loss", f"means loss_agg_mode {want}, and "
                           f"rl_config.loss_agg_mode is {rl.loss_agg_mode}",
                           f"set rl_config.loss_agg_mode: {want}, or remove token_level_loss",
                           rl.token_level_loss))
    if rl.clip_higher_enable is False:
        for key in ("clip_ratio_low", "clip_ratio_high"):
            value = getattr(rl, key)
            if value is not None and value != rl.clip_ratio:
                out.append(Problem(f"rl_config.{key}", f"differs from rl_config.clip_ratio="
                                   f"{rl.clip_ratio} while clip_higher_enable is false (both "
                                   "bounds are clip_ratio)", f"set clip_higher_enable: true "
                                   f"to clip at {key}, or remove {key}", value))
    if rl.overlong_buffer_enable is not None and \
            rl.overlong_buffer_enable != (rl.overlong_buffer_len > 0):
        out.append(Problem("rl_config.overlong_buffer_enable", f"is "
                           f"{str(rl.overlong_buffer_enable).lower()} while rl_config."
                           f"overlong_buffer (overlong_buffer_len) is {rl.overlong_buffer_len}",
                           "set overlong_buffer > 0 to penalise, or overlong_buffer_enable: "
                           "false and overlong_buffer: 0", rl.overlong_buffer_enable))
    if rl.rollout_max_tokens is not None and rl.rollout_max_tokens != max_tokens:
        out.append(Problem("rl_config.rollout_max_tokens", f"differs from generate_config."
                           f"sampling_config.max_tokens={max_tokens}, the response limit the "
                           "engines sample to and the overlong penalty ramps to",
                           f"set both to one value (e.g. rollout_max_tokens: {max_tokens})",
                           rl.rollout_max_tokens))
    if rl.filter_groups_metric is not None and rl.verifier_function != [rl.filter_groups_metric]:
        out.append(Problem("rl_config.filter_groups_metric", "must name the verifier the score "
                           f"is: MindRL's dynamic sampling keeps groups whose scores differ, and "
                           f"the score is the weighted sum of {rl.verifier_function}",
                           "set verifier_function to [METRIC] alone, or remove "
                           "filter_groups_metric", rl.filter_groups_metric))
    if rl.filter_groups_max_batches is not None and \
            rl.filter_groups_max_batches not in (-1, rl.max_gen_rounds):
        out.append(Problem("rl_config.filter_groups_max_batches", f"differs from rl_config."
                           f"max_gen_rounds={rl.max_gen_rounds}, MindRL's bound on generation "
                           "rounds per step (-1, unbounded in MindSpeed-RL, means that bound "
                           "here)", f"set rl_config.max_gen_rounds: "
                           f"{rl.filter_groups_max_batches}, or filter_groups_max_batches: -1",
                           rl.filter_groups_max_batches))
    if rl.filter_groups_train_batch_size is not None and \
            rl.filter_groups_train_batch_size != mt.global_batch_size:
        out.append(Problem("rl_config.filter_groups_train_batch_size", f"differs from "
                           f"megatron_training.global_batch_size={mt.global_batch_size}: "
                           "MindRL's dynamic sampling fills exactly one step's prompts",
                           f"set it to {mt.global_batch_size}, or remove it",
                           rl.filter_groups_train_batch_size))
    return out


def check_dapo(run: RunConfig) -> list[Problem]:
    return check_overlong(run) + check_dapo_names(run)
