"""Step metrics from a hand-made batch; the moving average behind the reward curve."""

import pytest
import torch

from mindrl.data.batch import Batch
from mindrl.trainer.metrics import batch_metrics, distill_metrics, moving_average, perf_metrics


def test_batch_metrics_hand_computed():
    batch = {"prompt_mask": torch.tensor([[0, 1, 1], [1, 1, 1]]),
             "response_mask": torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]]),
             "token_rewards": torch.tensor([[0.0, 1.0, 0, 0], [0.0, 0.0, 0.0, -0.5]])}
    m = batch_metrics(batch, torch.tensor([1.0, 0.0]), ["stop", "length"])
    assert m["critic/score/mean"] == 0.5 and m["critic/score/max"] == 1.0
    assert m["critic/rewards/min"] == -0.5 and m["critic/rewards/mean"] == 0.25
    assert m["response_length/mean"] == 3.0 and m["response_length/max"] == 4.0
    assert m["response_length/min"] == 2.0 and m["response_length/clip_ratio"] == 0.5
    # lengths 2 and 4: the median halfway, p90 at 2 + 0.9 x 2 (linear interpolation)
    assert m["response_length/p50"] == 3.0 and m["response_length/p90"] == pytest.approx(3.8)
    assert m["prompt_length/mean"] == 2.5 and m["prompt_length/min"] == 2.0
    assert m["perf/total_num_tokens"] == 11.0
    step = {"perf/total_num_tokens": 11.0, "timing_s/step": 2.0, "timing_s/update_actor": 0.5}
    assert perf_metrics(step) == {"perf/time_per_step": 2.0, "perf/throughput": 5.5}
    # A VL model's update reports its tower's seconds: their share of timing_s/update_actor.
    assert perf_metrics({**step, "actor/vision_tower_s": 0.125})["vision/update_share"] == 0.25


def test_moving_average_window():
    assert moving_average([1, 2, 3, 4], 2) == [1.0, 1.5, 2.5, 3.5]
    assert moving_average([4.0], 10) == [4.0]


def test_console_line_names_the_step_and_what_is_there():
    from mindrl.trainer.metrics import console_line

    line = console_line(3, 10, {"critic/score/mean": 0.25, "actor/grad_norm": 1.5e-3,
                                "timing_s/step": 2.0, "other": 7.0})
    assert line == "step 3/10 | score 0.25 | grad_norm 0.0015 | step_s 2"


def test_distill_metrics_over_the_trained_tokens_only():
    """The student (the rollout's sampled-token log-probs) against the teacher, k1: one
    sample's second token is a tool's inserted answer (loss_mask 0, log-prob 0), with a
    teacher log-prob that would dominate every figure were it counted."""
    batch = Batch.of(
        response_mask=torch.tensor([[1, 1, 1], [1, 1, 0]]),
        loss_mask=torch.tensor([[1, 0, 1], [1, 1, 0]]),
        rollout_log_probs=torch.tensor([[-0.5, 0.0, -1.0], [-2.0, -0.2, 0.0]]),
        teacher_log_probs=torch.tensor([[-1.0, -30.0, -1.5], [-1.0, -0.4, 0.0]]))
    m = distill_metrics(batch, "k1")
    # k1 on the four trained tokens: 0.5, 0.5, -1.0, 0.2
    assert m["distill/reverse_kl_mean"] == pytest.approx(0.05)
    # sorted -1, 0.2, 0.5, 0.5: p90 at index 2.7 -> 0.5
    assert m["distill/reverse_kl_p90"] == pytest.approx(0.5)
    assert m["distill/teacher_log_prob_mean"] == pytest.approx((-1.0 - 1.5 - 1.0 - 0.4) / 4)
    assert m["distill/student_log_prob_mean"] == pytest.approx((-0.5 - 1.0 - 2.0 - 0.2) / 4)
    k3 = distill_metrics(batch, "k3")["distill/reverse_kl_mean"]
    d = torch.tensor([0.5, 0.5, -1.0, 0.2])
    assert k3 == pytest.approx((torch.exp(-d) + d - 1).mean().item())
