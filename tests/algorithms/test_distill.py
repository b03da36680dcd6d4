"""On-policy distillation's maths (algorithms/distill.py and its place in objective.py): each
estimator against a hand computation, the loss mask, the task reward on and off, the gradient's
sign, and what each estimator's gradient is in expectation."""

import math

import pytest
import torch

from mindrl.algorithms import DISTILL_LOSSES, KL_ESTIMATORS
from mindrl.algorithms.distill import (ESTIMATORS, distill_loss, reverse_kl, token_quantile)
from mindrl.algorithms.objective import (DISTILL_COUNT, merge_mini_batches, micro_batch_loss,
                                         micro_batch_totals, mini_batch_metrics)
from mindrl.config import names
from mindrl.config.roles import LossConfig

# Student s and teacher t log-probs of three sampled tokens; the last row's third is masked.
STUDENT = torch.tensor([[-0.5, -2.0, -1.0], [-0.1, -3.0, -0.7]])
TEACHER = torch.tensor([[-1.5, -1.0, -1.0], [-0.3, -2.0, -9.0]])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])


def by_hand(estimator: str, s: float, t: float) -> float:
    d = s - t
    return {"k1": d, "k2": 0.5 * d * d, "k3": math.exp(-d) + d - 1.0}[estimator]


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_each_estimator_equals_its_hand_computation(estimator):
    got = reverse_kl(STUDENT, TEACHER, estimator)
    want = torch.tensor([[by_hand(estimator, s, t) for s, t in zip(rs, rt)]
                         for rs, rt in zip(STUDENT.tolist(), TEACHER.tolist())])
    assert torch.allclose(got, want, atol=1e-6)
    # token-mean over the 5 trained tokens
    valid = [by_hand(estimator, s, t) for s, t, m in
             zip(STUDENT.flatten().tolist(), TEACHER.flatten().tolist(), MASK.flatten().tolist())
             if m]
    loss = distill_loss(STUDENT, TEACHER, MASK, "reverse_kl", estimator, "token-mean")
    assert loss.item() == pytest.approx(sum(valid) / 5, abs=1e-6)


def test_the_names_config_accepts_are_the_registries():
    assert set(names.DISTILL_LOSSES) == set(DISTILL_LOSSES) == {"reverse_kl"}
    assert set(names.DISTILL_ESTIMATORS) == set(ESTIMATORS) <= set(KL_ESTIMATORS)


def test_a_masked_tokens_teacher_log_prob_changes_nothing():
    student = STUDENT.clone().requires_grad_(True)
    other = TEACHER.clone()
    other[1, 2] = 50.0              # the masked token (a tool's inserted answer): wild
    a = distill_loss(student, TEACHER, MASK, estimator="k3")
    grad_a, = torch.autograd.grad(a, student)
    b = distill_loss(student, other, MASK, estimator="k3")
    grad_b, = torch.autograd.grad(b, student)
    assert a.item() == b.item() and torch.equal(grad_a, grad_b)
    assert grad_a[1, 2] == 0


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_a_token_the_student_overweights_is_pushed_down(estimator):
    # s > t on the first token, s < t on the second: descent lowers the first, raises the
    # second (k1 pushes every token down by the same amount: its expected gradient is 0).
    student = torch.tensor([[-0.5, -2.0]], requires_grad=True)
    loss = distill_loss(student, torch.tensor([[-1.5, -1.0]]), torch.ones(1, 2),
                        estimator=estimator)
    loss.backward()
    grad = student.grad[0]
    assert grad[0] > 0
    if estimator == "k1":
        assert grad[1] == pytest.approx(0.5)
    else:
        assert grad[1] < 0


def _expected_gradient(estimator: str, student_logits, teacher_log_probs):
    """d/d logits of E_{x ~ student}[estimator(log pi(x), log t(x))], the sampling weights held
    fixed (samples are data): the gradient a large on-policy batch gives the loss."""
    log_pi = torch.log_softmax(student_logits, -1)
    per_token = reverse_kl(log_pi, teacher_log_probs, estimator)
    loss = (log_pi.exp().detach() * per_token).sum()
    return torch.autograd.grad(loss, student_logits)[0]


def test_each_estimators_expected_gradient():
    """k2: the gradient of KL(student || teacher); k3: of KL(teacher || student); k1: zero."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, generator=g, dtype=torch.float64, requires_grad=True)
    teacher = torch.log_softmax(torch.randn(6, generator=g, dtype=torch.float64), -1)
    log_pi = torch.log_softmax(logits, -1)
    reverse = (log_pi.exp() * (log_pi - teacher)).sum()
    forward = (teacher.exp() * (teacher - log_pi)).sum()
    want_reverse, = torch.autograd.grad(reverse, logits, retain_graph=True)
    want_forward, = torch.autograd.grad(forward, logits)
    assert torch.allclose(_expected_gradient("k2", logits, teacher), want_reverse, atol=1e-12)
    assert torch.allclose(_expected_gradient("k3", logits, teacher), want_forward, atol=1e-12)
    assert torch.allclose(_expected_gradient("k1", logits, teacher), torch.zeros_like(logits),
                          atol=1e-12)
    assert want_reverse.abs().max() > 0.05 and not torch.allclose(want_reverse, want_forward)


def test_the_p90_over_trained_tokens():
    values = torch.tensor([[1.0, 2.0, 3.0, 100.0], [4.0, 5.0, 6.0, -7.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0]])
    # over 1..6 (linear interpolation): 5 + 0.5 x (6 - 5)
    assert token_quantile(values, mask, 0.9).item() == pytest.approx(5.5)
    assert token_quantile(values, torch.zeros_like(mask), 0.9).item() == 0.0


# ---------------------------------------------------------------- inside the objective

def _micro():
    """Two samples; the GRPO side: on-policy (ratio 1), advantages +1 / -2."""
    log_probs = STUDENT.clone().requires_grad_(True)
    micro = {"response_mask": torch.ones(2, 3, dtype=torch.long), "loss_mask": MASK,
             "advantages": torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]]),
             "teacher_log_probs": TEACHER}
    return log_probs, torch.zeros(2, 3), micro


def _loss(cfg):
    log_probs, entropy, micro = _micro()
    loss, parts = micro_batch_loss(log_probs, entropy, micro, cfg, torch.tensor(5), 1, 1)
    return loss, parts, log_probs


def test_distillation_alone_is_exactly_coef_times_the_term():
    cfg = LossConfig(distill_loss="reverse_kl", distill_estimator="k3", distill_coef=0.25)
    loss, parts, log_probs = _loss(cfg)
    term = distill_loss(STUDENT, TEACHER, MASK, estimator="k3")
    assert loss.item() == pytest.approx(0.25 * term.item(), abs=1e-7)
    # on-policy token-mean pg = -mean(A) over the 5 trained tokens = -(3 - 4) / 5
    assert parts["actor/pg_loss"].item() == pytest.approx(0.2)   # reported, not trained on
    assert parts["actor/distill_loss"].item() == pytest.approx(term.item(), abs=1e-7)
    assert parts[DISTILL_COUNT].item() == 5
    loss.backward()
    s, t = STUDENT, TEACHER
    # d/ds of 0.25 x mean k3 = 0.25 x (1 - e^(t - s)) / 5, nothing from the advantages
    want = 0.25 * (1 - torch.exp(t - s)) / 5 * MASK
    assert torch.allclose(log_probs.grad, want, atol=1e-6)


def test_with_the_task_reward_it_is_grpo_plus_coef_times_the_term():
    plain = LossConfig()
    mixed = LossConfig(distill_loss="reverse_kl", distill_estimator="k2", distill_coef=0.5,
                       distill_use_task_reward=True)
    grpo, grpo_parts, _ = _loss(plain)
    loss, parts, _ = _loss(mixed)
    term = distill_loss(STUDENT, TEACHER, MASK, estimator="k2")
    assert loss.item() == pytest.approx(grpo.item() + 0.5 * term.item(), abs=1e-7)
    assert grpo.item() == pytest.approx(0.2)
    assert "actor/distill_loss" not in grpo_parts and DISTILL_COUNT not in grpo_parts


def test_the_distill_metric_is_reported_only_with_a_teacher():
    cfg = LossConfig(distill_loss="reverse_kl", distill_estimator="k1")
    _, parts, _ = _loss(cfg)
    # two micro batches of the same parts: a share each of 0.5 of the mean
    half = {k: v * 0.5 if k == "actor/distill_loss" else v for k, v in parts.items()}
    metrics = mini_batch_metrics(micro_batch_totals([half, half], "cpu").tolist())
    k1_mean = (1.0 - 1.0 + 0.0 + 0.2 - 1.0) / 5
    assert metrics["actor/distill_loss"] == pytest.approx(k1_mean, abs=1e-6)
    merged = merge_mini_batches([metrics, metrics])
    assert merged["actor/distill_loss"] == pytest.approx(k1_mean, abs=1e-6)
    assert DISTILL_COUNT not in merged
    _, plain, _ = _loss(LossConfig())
    assert "actor/distill_loss" not in mini_batch_metrics(
        micro_batch_totals([plain], "cpu").tolist())
