"""bench/bench_async.py without a training run: its arguments, every loop's recipe through
MindRL's validation, and the figures (speed-up, idle fractions, staleness) from two
hand-written metrics.jsonl files."""

import json

import pytest

from bench import bench_async
from bench.common import mindrl_runs, shapes


def _row(step_s, gen_s, response=50.0, **extra):
    return {"timing_s/step": step_s, "timing_s/gen": gen_s, "timing_s/reward": 0.1,
            "timing_s/old_log_prob": 0.0, "timing_s/ref": 0.0, "timing_s/update_actor": 1.0,
            "timing_s/reshard": 0.2, "response_length/mean": response,
            "response_length/max": 3 * response, "prompt_length/mean": 10.0,
            "critic/score/mean": 0.5, **extra}


def _write(path, rows):
    # a validation row (no step timing) among them, as the trainer writes it
    path.write_text("\n".join(json.dumps(r) for r in [{"val/score": 0.1}, *rows]) + "\n")
    return path


def _async_row(step_s, staleness_mean=1.0, staleness_max=1.0):
    return _row(step_s, 0.1, **{"async/engine_idle_s": 0.3, "async/actor_wait_s": 0.25,
                                "async/overlap_fraction": 0.8,
                                "rollout/staleness_mean": staleness_mean,
                                "rollout/staleness_max": staleness_max})


def test_the_speedup_and_idle_fractions_from_two_metrics_files(tmp_path):
    # sync: warm-up, then 5 steps of 4 s with 2 s generating; 4 completions of 50 tokens
    sync = _write(tmp_path / "sync.jsonl", [_row(10.0, 9.0)] + [_row(4.0, 2.0)] * 5)
    # one_step: warm-up (staleness 5 there must not count), 4 steps of 2.5 s, one of 5 s
    one = _write(tmp_path / "one.jsonl",
                 [_async_row(0.1, 5.0, 5.0)] + [_async_row(2.5)] * 3
                 + [_async_row(2.5, 0.5, 1.0), _async_row(5.0)])
    steps = {mode: [bench_async.async_step(r, completions=4) for r in mindrl_runs.step_rows(path)]
             for mode, path in (("sync", sync), ("one_step", one))}
    results = {mode: {**bench_async.async_summary(s), **bench_async.whole_run(s)}
               for mode, s in steps.items()}
    s, a = results["sync"], results["one_step"]
    assert s["timed_steps"] == a["timed_steps"] == 5
    assert s["completion_tokens_per_s"] == 200 / 4.0 == 50.0
    assert a["completion_tokens_per_s"] == 200 / 2.5 == 80.0      # median: not the 5 s step
    # sync: the engine idles all but its 2 s of generation, the actor waits those 2 s
    assert (s["engine_idle_fraction"], s["actor_wait_fraction"], s["overlap_fraction"]) == \
        (0.5, 0.5, 0.0)
    assert (s["staleness_mean"], s["staleness_max"]) == (0.0, 0.0)
    # async: engine idle 0.3 s in the window + the 0.2 s sync over 2.5 s; wait 0.25 / 2.5
    assert a["engine_idle_fraction"] == pytest.approx(0.2)
    assert a["actor_wait_fraction"] == pytest.approx(0.1)
    assert a["overlap_fraction"] == 0.8
    assert a["staleness_mean"] == pytest.approx(0.9) and a["staleness_max"] == 1.0
    # the ratio is over whole runs: 6 x 200 tokens in 30 s against 6 x 200 in 15.1 s
    assert (s["run_completion_tokens"], s["run_s"]) == (1200.0, 30.0)
    assert a["run_s"] == pytest.approx(15.1)
    line = bench_async.headline(results)
    assert line["async_speedup_natural"] == round(30.0 / 15.1, 3) == 1.987
    assert line["run_completion_tokens_per_s_sync"] == 40.0
    assert "async_speedup_natural_bounded2" not in line
    assert line["completion_tokens_per_s_sync"] == 50.0
    assert line["engine_idle_fraction_one_step"] == 0.2
    assert line["staleness_max_one_step"] == 1.0 and line["timed_steps_sync"] == 5
    assert line["completion_length"]["one_step"]["mean"] == 50.0
    # bounded2 at 80 tokens/s over its run: 2x the synchronous loop
    results["bounded2"] = {**a, "run_completion_tokens_per_s": 80.0}
    assert bench_async.headline(results)["async_speedup_natural_bounded2"] == 2.0


def test_arguments_default_to_the_three_loops_and_refuse_unknown_ones():
    args = bench_async.parse_args([])
    assert args.modes == ["sync", "one_step", "bounded2"] and args.threads == 1
    assert args.steps is None and args.results is None
    args = bench_async.parse_args(["--modes", "sync,bounded2", "--steps", "2", "--n", "4"])
    assert (args.modes, args.steps, args.n) == (["sync", "bounded2"], 2, 4)
    with pytest.raises(SystemExit):
        bench_async.parse_args(["--modes", "sync,two_step"])


def test_every_loop_runs_the_same_layout_with_its_own_bound(tmp_path):
    from mindrl.config import ClusterResources, load_recipe
    from mindrl.config.checks.asynchronous import staleness_bound

    natural = shapes.SHAPES["natural"]
    seen = {}
    for mode in bench_async.MODES:
        shape = bench_async.mode_shape(natural, mode, threads=1)
        assert (shape.max_tokens, shape.exact_length, shape.model) == \
            (1024, False, "bench-qwen2-75m")
        run = load_recipe(mindrl_runs.RECIPE, [*mindrl_runs.mindrl_overrides(shape, tmp_path),
                                             *bench_async.overrides(mode, shape)],
                          cluster=ClusterResources("cpu", 2))
        gen = run.generate_config
        assert gen.rollout_devices == 1 and gen.sampling_config.max_tokens == 1024
        assert run.megatron_training.cpu_threads == gen.cpu_threads == 1
        # 1 warm-up + 5 timed + the largest bound's tail: every loop trains the same batches
        assert run.megatron_training.train_iters == 6 + 2
        assert str(run.run_dir).endswith(f"mindrl-async-{mode}")
        seen[mode] = (run.rl_config.async_mode, staleness_bound(run.rl_config),
                      run.rl_config.partial_rollout_tokens, run.rl_config.inflight_sync)
    assert seen == {"sync": ("off", 0, None, "off"), "one_step": ("one_step", 1, None, "off"),
                    "bounded2": ("bounded", 2, None, "off"),
                    "bounded2_partial": ("bounded", 2, 1024, "off"),
                    "bounded2_inflight": ("bounded", 2, None, "keep_kv"),
                    "bounded2_recompute": ("bounded", 2, None, "recompute_kv")}
    assert {mode: bound for mode, (_, bound, _, _) in seen.items()} == bench_async.BOUND


def test_a_loop_at_bound_k_leaves_its_last_k_steps_out_of_the_steady_steps():
    # at bound 2 the last two steps only train on batches generated earlier: 8.4 s steps
    # beside 30 s ones would double the tokens/s
    steps = [{"step": i} for i in range(1, 9)]
    assert [s["step"] for s in bench_async.steady_steps(steps, "bounded2")] == list(range(1, 7))
    assert [s["step"] for s in bench_async.steady_steps(steps, "one_step")] == list(range(1, 8))
    assert bench_async.steady_steps(steps, "sync") == steps
