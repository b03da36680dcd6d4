"""Per-step metrics from the step's batch (pure functions; names as verl / MindSpeed-RL)."""

from __future__ import annotations

from typing import Dict, Sequence

import torch

from mindrl.algorithms.distill import reverse_kl, token_quantile
from mindrl.algorithms.masked import masked_mean
from mindrl.trainer.drift import warn_on_drift  # noqa: F401  (the trainer's import of the alarm)


def _stats(prefix: str, values: torch.Tensor) -> Dict[str, float]:
    values = values.float()
    return {f"{prefix}/mean": values.mean().item(), f"{prefix}/max": values.max().item(),
            f"{prefix}/min": values.min().item()}


def batch_metrics(batch: Dict[str, torch.Tensor], scores: torch.Tensor,
                  finish_reasons: Sequence[str]) -> Dict[str, float]:
    """critic/score, critic/rewards, response_length, prompt_length, perf/total_num_tokens."""
    response_len = batch["response_mask"].sum(-1)
    prompt_len = batch["prompt_mask"].sum(-1)
    rewards = batch["token_rewards"].sum(-1)
    out = {**_stats("critic/score", scores), **_stats("critic/rewards", rewards),
           **_stats("response_length", response_len), **_stats("prompt_length", prompt_len)}
    # Completions vary several-fold inside a batch: the spread, not only the mean.
    quantiles = torch.quantile(response_len.float(), torch.tensor([0.5, 0.9]))
    out["response_length/p50"], out["response_length/p90"] = quantiles.tolist()
    out["response_length/clip_ratio"] = (
        sum(r == "length" for r in finish_reasons) / max(len(finish_reasons), 1))
    out["perf/total_num_tokens"] = float(response_len.sum() + prompt_len.sum())
    return out


def distill_metrics(batch, estimator: str) -> Dict[str, float]:
    """distill/*: the teacher against the student on the student's own samples, over the
    trained tokens (loss_mask: a tool's inserted answer is left out). The student is the
    policy that sampled them (the rollout's sampled-token log-probs, before this step's
    update); the per-token reverse KL uses the objective's estimator: its mean and its p90
    over tokens, and both sides' mean log-prob."""
    mask = batch.trained_mask()
    student, teacher = batch["rollout_log_probs"], batch["teacher_log_probs"]
    kl = reverse_kl(student, teacher, estimator)
    return {"distill/reverse_kl_mean": masked_mean(kl, mask).item(),
            "distill/reverse_kl_p90": token_quantile(kl, mask, 0.9).item(),
            "distill/teacher_log_prob_mean": masked_mean(teacher, mask).item(),
            "distill/student_log_prob_mean": masked_mean(student, mask).item()}


def reward_model_metrics(scores: torch.Tensor) -> Dict[str, float]:
    """critic/reward_model/{mean,max,min}: the reward model's raw scores, before weighting."""
    return _stats("critic/reward_model", scores)


def policy_version_metrics(batch, actor_version: int) -> Dict[str, float]:
    """rollout/policy_version: the oldest weights version among the batch's samples (the
    number of actor updates behind the weights that generated it); rollout/staleness: how
    many versions the update's starting weights (`actor_version`) are ahead of it, at most.
    The synchronous loop generates from the weights it updates: staleness 0."""
    oldest = int(batch["policy_version"].min())
    return {"rollout/policy_version": float(oldest),
            "rollout/staleness": float(actor_version - oldest)}


def perf_metrics(step: Dict[str, float]) -> Dict[str, float]:
    """Time and tokens/s of a step's metrics; a VL model's tower share of the update."""
    seconds = step["timing_s/step"]
    return {"perf/time_per_step": seconds,
            "perf/throughput": step["perf/total_num_tokens"] / max(seconds, 1e-9),
            **vision_share(step)}


def vision_share(metrics: Dict[str, float]) -> Dict[str, float]:
    """vision/update_share: the vision tower's seconds inside the update (forward and
    backward, actor rank 0) over timing_s/update_actor; absent for a text model."""
    seconds = metrics.get("actor/vision_tower_s")
    if seconds is None:
        return {}
    return {"vision/update_share": seconds / max(metrics["timing_s/update_actor"], 1e-9)}


CONSOLE_KEYS = (("score", "critic/score/mean"), ("response_len", "response_length/mean"),
                ("pg_loss", "actor/pg_loss"), ("kl_loss", "actor/kl_loss"),
                ("distill_loss", "actor/distill_loss"),
                ("grad_norm", "actor/grad_norm"), ("lr", "actor/lr"),
                ("step_s", "timing_s/step"))


def console_line(step: int, total: int, metrics: Dict[str, float]) -> str:
    """The step's one-line summary printed every actor_config.log_interval steps."""
    parts = [f"{name} {metrics[key]:.4g}" for name, key in CONSOLE_KEYS if key in metrics]
    return f"step {step}/{total} | " + " | ".join(parts)


def moving_average(values: Sequence[float], window: int) -> list:
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out
