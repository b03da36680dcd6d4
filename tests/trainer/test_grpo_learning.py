"""The embedded CPU default learns on any machine: a shortened grpo_tiny_cpu (same settings,
fewer steps) on three seeds.

One fp32 run is bit-identical on one machine but not across CPU makes, so a single curve
proves little: seeds stand in for the machines we cannot choose. Each seed must gain on its
own, must not unlearn once it has learned (the collapse of issue 13), and the mean must clear
the bar; a broken advantage sign, a frozen policy or a weight sync that never reaches vLLM
leaves every seed flat. The message carries each seed's figures. Measured on AMD EPYC
(2026-11): gains 0.72 / 0.71 / 0.62, largest falls 0.03 / 0.11 / 0.04.
"""

import subprocess

from grpo_runs import _command, metrics

from mindrl.trainer.learning_curve import policy_scores, summarize_curve

SEEDS = (1, 2, 3)
STEPS = 200
EDGE = 40            # steps averaged at each end of the curve
SEED_GAIN = 0.4      # every seed: last-40 mean score minus first-40
MEAN_GAIN = 0.5      # over the seeds
MAX_FALL = 0.25      # every seed: the 20-step average's largest fall after reaching 0.6


def _run_seeds_at_once(work, seeds):
    """One CLI run per seed, all at the same time (each its own private Ray cluster): a run
    keeps about one core busy, and its fp32 results do not depend on what else runs."""
    procs = {}
    for seed in seeds:
        run_dir = work / "runs" / f"seed{seed}"
        run_dir.mkdir(parents=True)
        cmd, env = _command(work, run_dir, [f"megatron_training.seed={seed}",
                                            f"megatron_training.train_iters={STEPS}",
                                            f"rl_config.save_freq={STEPS}"])
        log = open(run_dir.parent / f"seed{seed}.log", "w")
        procs[seed] = (subprocess.Popen(cmd, env=env, cwd=str(work), stdout=log,
                                        stderr=subprocess.STDOUT), log, run_dir)
    for seed, (proc, log, run_dir) in procs.items():
        code = proc.wait(timeout=1800)
        log.close()
        assert code == 0, f"seed {seed} failed:\n{log.name}: " + open(log.name).read()[-3000:]
    return {seed: run_dir for seed, (_, _, run_dir) in procs.items()}


def test_tiny_recipe_reward_rises_on_every_seed(tmp_path):
    summaries = {}
    for seed, run_dir in _run_seeds_at_once(tmp_path, SEEDS).items():
        scores = policy_scores(metrics(run_dir))
        assert len(scores) == STEPS
        summaries[seed] = summarize_curve(scores, edge=EDGE)
    report = "\n".join(f"seed {seed}: {s.describe()}" for seed, s in summaries.items())
    gains = [s.gain for s in summaries.values()]
    assert min(gains) >= SEED_GAIN, f"a seed gained less than {SEED_GAIN}:\n{report}"
    assert sum(gains) / len(gains) >= MEAN_GAIN, f"mean gain below {MEAN_GAIN}:\n{report}"
    falls = [s.max_drop for s in summaries.values()]
    assert max(falls) <= MAX_FALL, f"a seed unlearned by more than {MAX_FALL}:\n{report}"
