"""RuleReward / VerifierPool end to end: weights, adversarial input, hangs, crashes, recovery.

Pools are module-scoped (worker start-up is the expensive part) and use short timeouts.
"""

import os
import time

import pytest

from mindrl.rewards import ERROR, OK, TIMEOUT, RuleReward, VerifierPool

TIMEOUT_S = 2.0
HELPERS = ["support.hang_verifiers"]  # workers import it by name (tests/ is on sys.path)


def r1(answer, think="ok"):
    return f"<think>\n{think}\n</think>\n<answer>\n{answer}\n</answer>"


@pytest.fixture(scope="module")
def math_reward():
    with RuleReward(
        ["base_acc", "acc", "format"], [1.0, 0.5, 0.25], verifier_timeout=TIMEOUT_S, verifier_parallel=2
    ) as reward:
        yield reward


@pytest.fixture(scope="module")
def pool():
    with VerifierPool(num_workers=2, timeout=TIMEOUT_S, worker_imports=HELPERS) as p:
        yield p


def test_weights_combine(math_reward):
    completions = [
        r1("\\boxed{\\frac{1}{2}}"),  # all three
        r1("\\boxed{3}"),  # format only
        "\\boxed{0.5}",  # acc only
        "nothing",
    ]
    scores, metrics = math_reward.score(completions, ["0.5"] * 4)
    assert scores == pytest.approx([1.75, 0.25, 0.5, 0.0])
    assert metrics["rewards/base_acc"] == pytest.approx(0.25)
    assert metrics["rewards/acc"] == pytest.approx(0.5)
    assert metrics["rewards/format"] == pytest.approx(0.5)
    assert metrics["rewards/score"] == pytest.approx(2.5 / 4)
    assert metrics["rewards/timeouts"] == 0 and metrics["rewards/errors"] == 0


def test_adversarial_completions_time_out_or_fail_and_pool_keeps_working(math_reward):
    adversarial = [
        "x" * (1 << 20) + "\\boxed{2}",  # 1 MB
        "\\boxed{{{{",
        "\\boxed{9**9**9}",
        "\\boxed{9^{9^{9}}}",  # sympy evaluates the tower: runs far past the timeout
        "\\boxed{" + "\\frac{1}{" * 2000 + "2" + "}" * 2000 + "}",
        "\\boxed{" + "9" * 10**6 + "}",
    ]
    adversarial = [a for adv in adversarial for a in (adv, r1(adv))]
    completions = adversarial + [r1("\\boxed{1}")]
    start = time.monotonic()
    scores, metrics = math_reward.score(completions, ["1"] * len(completions))
    elapsed = time.monotonic() - start
    # Every adversarial sample scores 0 except `format` on the well-formed wrappers.
    assert scores[:-1] == pytest.approx([0.0, 0.25] * 6)
    assert scores[-1] == pytest.approx(1.75)  # a normal sample after them is scored right
    assert metrics["rewards/timeouts"] >= 2  # the power tower, under acc and base_acc
    # Two workers work through the timeouts in parallel: no job waits more than its timeout.
    assert elapsed < metrics["rewards/timeouts"] * TIMEOUT_S + 5
    scores, metrics = math_reward.score([r1("\\boxed{0.5}")], ["\\frac{1}{2}"])
    assert scores == pytest.approx([1.75]) and metrics["rewards/timeouts"] == 0


def test_hang_is_killed_and_crash_and_raise_are_contained(pool, tmp_path):
    pid_file = tmp_path / "hung.pid"
    jobs = [
        ("arith", "7", "7", {}),
        ("test_sleep_forever", "", "", {"pid_file": str(pid_file)}),
        ("arith", "8", "7", {}),
        ("test_exit", "", "", {}),
        ("test_raise", "", "", {}),
        ("test_nan", "", "", {}),
        ("arith", "7", "7", {}),
    ]
    restarts = pool.restarts
    start = time.monotonic()
    out = pool.map(jobs)
    assert time.monotonic() - start < 2 * TIMEOUT_S + 8  # generous: shared, loaded CI cores
    assert [o.status for o in out] == [OK, TIMEOUT, OK, ERROR, ERROR, ERROR, OK]
    assert [o.value for o in out] == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    assert "RuntimeError: verifier bug" in out[4].detail
    assert pool.restarts == restarts + 2  # the hung worker and the one that exited
    hung_pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):  # killed and reaped, not left running
        os.kill(hung_pid, 0)
    assert [o.value for o in pool.map([("arith", "7", "7", {})] * 40)] == [1.0] * 40


def test_rule_reward_counts_timeouts_and_errors():
    with RuleReward(
        ["arith", "test_sleep_forever", "test_exit"],
        [1.0, 1.0, 1.0],
        verifier_timeout=1.0,
        verifier_parallel=2,
        worker_imports=HELPERS,
    ) as reward:
        scores, metrics = reward.score(["7", "3"], ["7", "7"])
    assert scores == [1.0, 0.0]
    assert metrics["rewards/arith"] == 0.5
    assert metrics["rewards/test_sleep_forever"] == 0.0
    assert metrics["rewards/timeouts"] == 2 and metrics["rewards/errors"] == 2


def test_spawn_context_and_memory_limit():
    with VerifierPool(
        num_workers=1, timeout=10, worker_imports=HELPERS, mp_context="spawn", memory_limit_mb=1024
    ) as p:
        out = p.map(
            [("test_alloc", "", "", {"mb": 4096}), ("test_alloc", "", "", {"mb": 1}), ("test_exit", "", "", {})]
        )
        assert [o.status for o in out] == [ERROR, OK, ERROR]
        assert "MemoryError" in out[0].detail and out[1].value == 2**20
        assert p.map([("arith", " 7\n", "7", {})])[0].value == 1.0  # respawned after the exit


def test_countdown_and_overlong_through_config():
    cfg = {
        "verifier_function": ["countdown", "format"],
        "verifier_weight": [1.0, 0.1],
        "verifier_timeout": 5,
        "verifier_parallel": 1,
        "overlong_buffer_len": 10,
        "max_response_length": 100,
        "overlong_penalty_factor": 1.0,
    }
    task = '{"numbers": [3, 5, 7], "target": 22}'
    with RuleReward.from_config(cfg) as reward:
        scores, metrics = reward.score(
            [r1("3 * 5 + 7"), r1("3 * 5 + 7"), r1("9**9**9"), r1("3 * 5 + 7 + 7")],
            [task] * 4,
            response_lengths=[50, 95, 50, 50],
        )
    assert scores == pytest.approx([1.1, 0.6, 0.1, 0.1])
    assert metrics["rewards/overlong_penalty"] == pytest.approx(-0.125)


def test_config_errors_fail_fast():
    with pytest.raises(ValueError, match="verifier_function has 2 entries but verifier_weight has 1"):
        RuleReward(["acc", "format"], [1.0])
    with pytest.raises(ValueError, match="unknown verifier 'accuracy'.*known verifiers: acc"):
        RuleReward(["accuracy"], [1.0])
    with pytest.raises(ValueError, match="twice"):
        RuleReward(["acc", "acc"], [1.0, 1.0])


def test_worker_start_failure_raises_instead_of_hanging():
    pool = VerifierPool(num_workers=1, timeout=1, worker_imports=["no_such_module_for_mindrl_tests"])
    with pytest.raises(RuntimeError, match="(?s)failed to start.*no_such_module_for_mindrl_tests"):
        pool.map([("arith", "7", "7", {})])
    with pytest.raises(RuntimeError, match="closed"):
        pool.map([])


def test_many_cheap_jobs_complete_in_order_and_reuse_workers(pool):
    """2000 jobs in chunks across both workers: each outcome is its own job's (right and
    wrong answers alternate, so a reply sent to the wrong slot shows), and no worker is
    replaced. Throughput is bench/bench_rewards.py's, not a test's."""
    restarts = pool.restarts
    jobs = [("arith", str(i % 10 if i % 2 == 0 else (i + 1) % 10), str(i % 10), {})
            for i in range(2000)]
    out = pool.map(jobs)
    assert [o.status for o in out] == [OK] * 2000
    assert [o.value for o in out] == [1.0, 0.0] * 1000
    assert pool.restarts == restarts


def test_interrupted_map_leaves_pool_consistent(pool):
    jobs = [("arith", "7", "7", {})] * 20 + [("arith", "7", "7", {"unpicklable": lambda: 0})]
    with pytest.raises(Exception):
        pool.map(jobs * 2)
    assert [o.value for o in pool.map([("arith", "7", "7", {}), ("arith", "6", "7", {})])] == [1.0, 0.0]
