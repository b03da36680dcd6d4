"""The rollout engine group: prompts split across engines and merged back in prompt order,
samples that do not depend on the engine count, one weight sync reaching every engine, and a
dead engine named."""

import dataclasses
import os

import pytest
import torch

from mindrl.config.schema import GenerateConfig, SamplingConfig
from mindrl.data.batch import Batch
from mindrl.errors import WeightSyncError
from mindrl.rollout.engine_group import EngineDied, RolloutGroup
from mindrl.workers.placement import EngineSlot

pytestmark = pytest.mark.slow   # see tests/conftest.py

CONFIG = GenerateConfig(max_num_seqs=16, max_model_len=64, kv_cache_memory_bytes=16 * 2**20,
                        sampling_config=SamplingConfig(max_tokens=8, seed=0))


# ---------------------------------------------------------------------------- real engines

@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    from mindrl.models.tiny import make_tiny_model
    from mindrl.platforms import preload
    from mindrl.workers.worker_group import LOCAL_NODE_ENV, worker_env

    root = tmp_path_factory.mktemp("engine_group")
    dirs = [make_tiny_model("tiny-qwen2", "char", root / f"seed{s}", seed=s) for s in (0, 1)]
    node_env = pytest.MonkeyPatch()
    for key, value in LOCAL_NODE_ENV.items():
        node_env.setenv(key, value)
    with preload.ray_node_python():        # as a run's driver starts its node
        ray.init(address="local", num_cpus=2, include_dashboard=False,
                 object_store_memory=128 * 2**20, log_to_driver=False)
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="PACK")
    assert pg.wait(60)

    def group(count, tp=1, first_bundle=0):
        slots = [EngineSlot(pg, first_bundle + i, {"num_cpus": 0.5}, tuple(range(i, i + tp)))
                 for i in range(count)]
        config = dataclasses.replace(CONFIG, infer_tensor_parallel_size=tp)
        return RolloutGroup(dirs[0], config, 0, slots, worker_env())

    one, two = group(1), group(2)
    for g in (one, two):
        g.start()
    yield dirs, one, two, lambda: group(1, tp=2, first_bundle=1)   # bundle 0 is full
    one.shutdown()
    two.shutdown()
    remove_placement_group(pg)
    ray.shutdown()
    node_env.undo()


PROMPTS = [[5, 6, 7], [8, 9], [10], [11, 12, 13, 14], [15, 16]]


def _batch(n, prompts=PROMPTS):
    return Batch.from_prompts(prompts, n, pad_id=0, label=[str(i) for i in range(len(prompts))])


def test_two_engines_give_the_samples_of_one_in_prompt_order(cluster):
    """The Batch splits by prompt group across engines and merges back in prompt order: the
    prompt rows, labels and group ids as given, the responses of one engine exactly."""
    _, one, two, _ = cluster
    batch = _batch(3)
    a = one.generate(batch, seed=11)
    b = two.generate(batch, seed=11)
    assert b["group_id"].tolist() == a["group_id"].tolist() == [i for i in range(5)
                                                                for _ in range(3)]
    assert torch.equal(b["prompt_ids"], batch["prompt_ids"])
    assert b["label"] == batch["label"]
    assert b.response_lists() == a.response_lists()
    assert torch.equal(b["response_mask"], a["response_mask"])
    assert (a["rollout_log_probs"] - b["rollout_log_probs"]).abs().max() <= 1e-5
    assert len(b["finish_reason"]) == 15 and set(b["finish_reason"]) <= {"stop", "length"}
    assert "response_ids" not in batch                   # the input is not written to
    assert all(s > 0 for s in two.busy_seconds)          # both engines took part
    greedy = two.generate(_batch(1), temperature=0.0)
    assert greedy["group_id"].tolist() == list(range(5))


def test_two_submissions_in_flight_each_return_their_own_samples_in_prompt_order(cluster):
    """Two generates submitted before either is waited on: each engine answers them in
    submission order, so once the second is back the first is done; each handle gives exactly
    what a blocking generate of its batch gives, with the policy version the engines held when
    it was submitted."""
    _, _, two, _ = cluster
    first, second = _batch(2), _batch(3, prompts=[[20, 21], [22], [23, 24, 25]])
    alone = [two.generate(first, seed=11), two.generate(second, seed=5)]
    try:
        a = two.submit(first, seed=11)
        two.policy_version = 3                      # a sync between the two submissions
        b = two.submit(second, seed=5)
        got_b = b.wait()
        assert a.done()
        got_a = a.result()
    finally:
        two.policy_version = 0
    for got, want, version in ((got_a, alone[0], 0), (got_b, alone[1], 3)):
        assert got["group_id"].tolist() == want["group_id"].tolist()
        assert torch.equal(got["prompt_ids"], want["prompt_ids"])
        assert got.response_lists() == want.response_lists()
        assert got["policy_version"].tolist() == [version] * len(want)
    assert alone[0]["policy_version"].tolist() == [0] * 10
    assert a.wait() is got_a                        # waiting again gives the same batch


def test_a_partial_rollout_paused_for_a_sync_continues_to_the_whole_greedy_generation(cluster):
    """rollout/partial_handle.py on real engines: chunks of 3 tokens, paused in the first
    (which stops it; nothing is then in flight: the sync may run), continued on "version 1"
    (the same weights): greedy, the tokens and log-probs of one whole generate; the tokens
    sampled after the pause carry version 1, the samples their start version 0."""
    from mindrl.rollout.partial_handle import submit_in_chunks

    _, _, two, _ = cluster
    batch = _batch(1)
    whole = two.generate(batch, temperature=0.0)
    try:
        handle = submit_in_chunks(two, batch, 3, temperature=0.0)
        handle.pause()
        assert two.in_flight == 0 and not handle.done()
        two.policy_version = 1
        handle.resume()
        got = handle.wait()
    finally:
        two.policy_version = 0
    assert got.response_lists() == whole.response_lists()
    assert torch.equal(got["response_mask"], whole["response_mask"])
    assert (got["rollout_log_probs"] - whole["rollout_log_probs"]).abs().max() <= 1e-5
    assert got["finish_reason"] == whole["finish_reason"]
    assert got["policy_version"].tolist() == [0] * 5
    versions = got["token_policy_version"] * got["response_mask"]
    lengths = got["response_mask"].sum(1)
    assert lengths.max() > 3                        # some continued past the pause
    # The pause stopped chunk 1 after 1-3 tokens (as far as it got): version 0 up to there,
    # 1 after it, in every sample.
    for row, n in zip(versions.tolist(), lengths.tolist()):
        first = row[:n].count(0)
        assert 1 <= first <= 3 and row[:n] == [0] * first + [1] * (n - first)


def test_a_stop_reaches_a_running_generate(cluster):
    """`stop_generating` runs beside a generate (the engines' control concurrency group): a
    generate of 50 forced tokens a sample (all 16 in one batch of the engine), stopped once
    sent, answers fewer, with no finish reason; the engine then generates whole again.

    The stop is sent right after the generate, and on a loaded machine it can arrive after all
    50 steps (seen once in a suite run): that attempt answers whole and another is made. A
    stop that never reaches a running generate fails all three."""
    import ray

    _, _, two, _ = cluster
    prompts = [[5 + i, 6, 7] for i in range(4)]
    for _attempt in range(3):
        stop_id = two.next_stop_id()
        ref = two.engines[0].generate.remote(prompts, 4, max_tokens=50, min_tokens=50,
                                             stop_id=stop_id)
        two.stop_generating([stop_id])
        out = ray.get(ref, timeout=120)
        lengths = [len(ids) for ids in out.response_token_ids]
        if lengths != [50] * 16:
            break
        assert set(out.finish_reasons) == {"length"}       # whole: the stop came too late
    assert max(lengths) < 50, "the stop never reached a running generate in 3 attempts"
    assert set(out.finish_reasons) == {None}
    again = ray.get(two.engines[0].generate.remote(prompts[:2], 1, max_tokens=50, min_tokens=50,
                                                   stop_id=two.next_stop_id()), timeout=120)
    assert [len(ids) for ids in again.response_token_ids] == [50, 50]
    assert again.finish_reasons == ["length", "length"]


def test_turns_run_beside_each_other_on_one_engine(cluster):
    """Generates in the engines' TURNS group share one step loop (engines/vllm_stoppable
    SharedSteps): a short one sent after a long one answers first (it did not wait for the
    long one to end), and each answers exactly what it answers alone (seeds per prompt)."""
    import ray

    from mindrl.rollout.engine_group import TURNS

    _, one, _, _ = cluster
    engine = one.engines[0]
    long = ([[5, 6, 7]] * 4, 1), dict(max_tokens=50, min_tokens=50, seed=[1, 2, 3, 4])
    short = ([[8, 9], [10]], 1), dict(max_tokens=2, min_tokens=2, seed=[9, 10])
    alone = [ray.get(engine.generate.remote(*args, **kw), timeout=120) for args, kw in
             (long, short)]
    beside = engine.generate.options(concurrency_group=TURNS)
    refs = [beside.remote(*args, **kw, beside_others=True) for args, kw in (long, short)]
    ready, _ = ray.wait(refs, num_returns=1, timeout=120)
    assert ready == [refs[1]], "the short generate waited for the long one"
    for got, want in zip(ray.get(refs, timeout=120), alone):
        assert got.response_token_ids == want.response_token_ids
        assert got.finish_reasons == want.finish_reasons
        for a, b in zip(got.log_probs, want.log_probs):
            assert max(abs(x - y) for x, y in zip(a, b)) <= 1e-4


def test_an_interleaved_episode_on_a_real_engine_gives_the_chunked_rollout(cluster):
    """rollout/interleaved.py on a real engine: every token ends its turn (all ids stop), the
    episode inserts [5, 6] after turn 0 and ends after turn 1; each continued call runs
    exactly the prefix (checked by the bookkeeping), and greedy, the batch is the chunked
    rollout's, token for token."""
    import json

    from mindrl.rollout.interleaved import submit_interleaved
    from mindrl.rollout.partial_handle import submit_in_chunks

    dirs, one, _, _ = cluster
    vocab = json.loads((dirs[0] / "config.json").read_text())["vocab_size"]

    class TwoTurns:
        multi_turn = True

        def between(self, turns):
            return [[5, 6] if t.turn == 0 else None for t in turns]

    kw = dict(stop_token_ids=list(range(vocab)), temperature=0.0, seed=3)
    got = submit_interleaved(one, _batch(1), 8, TwoTurns(), **kw).wait()
    want = submit_in_chunks(one, _batch(1), 8, episode=TwoTurns(), **kw).wait()
    assert got.response_lists() == want.response_lists()
    assert [len(r) for r in got.response_lists()] == [4] * 5
    assert all(r[1:3] == [5, 6] for r in got.response_lists())
    assert got["loss_mask"].tolist() == want["loss_mask"].tolist()
    assert got["token_turn"].tolist() == want["token_turn"].tolist()


def test_one_sync_reaches_every_engine_and_a_mismatch_names_the_engine(cluster):
    from safetensors.torch import load_file

    from mindrl.ckpt.fingerprint import checkpoint_fingerprint, compare_fingerprints
    from mindrl.weight_sync.engine_fanout import EngineFanout
    from mindrl.weight_sync.target import WeightTarget

    dirs, _, two, _ = cluster
    fanout = EngineFanout(two.engines)
    assert fanout.dtype == torch.float32 and fanout.shared_weights is None
    with pytest.raises(WeightSyncError, match="rollout engine 0: check_fingerprint failed"):
        fanout.check_fingerprint(checkpoint_fingerprint(dirs[1]))
    weights = load_file(str(next(dirs[1].glob("*.safetensors"))))
    fanout.start_fingerprint()                  # digested before the load: not used after it
    fanout.load_weights(sorted(weights.items()))
    fanout.check_fingerprint(checkpoint_fingerprint(dirs[1]))   # both engines hold seed 1
    fanout.start_fingerprint()                  # the verified sync's order: digests, then check
    fanout.check_fingerprint(checkpoint_fingerprint(dirs[1]))
    fanout.start_fingerprint()
    with pytest.raises(WeightSyncError, match="rollout engine 0: check_fingerprint failed"):
        fanout.check_fingerprint(checkpoint_fingerprint(dirs[0]))
    assert isinstance(fanout, WeightTarget) and fanout.loads_in_background
    assert compare_fingerprints(fanout.fingerprint(), checkpoint_fingerprint(dirs[1]),
                                torch.float32) == []


def _idle_cpu_seconds(engine_pid: int, window_s: float = 1.0) -> float:
    """The most CPU any of the engine's TP worker processes used over the window, right after
    a generate: vLLM's queue readers spin for 1 s after each message (a spinning worker takes
    a fair share of the cores, >= 0.2 s here even among 10 busy processes), and sleep on the
    writer's notification on CPU (platforms/cpu/vllm_start.idle_queue_readers_sleep)."""
    import time

    import psutil

    workers = psutil.Process(engine_pid).children()
    assert workers, "no TP worker processes"
    before = [sum(w.cpu_times()[:2]) for w in workers]
    time.sleep(window_s)
    return max(sum(w.cpu_times()[:2]) - b for w, b in zip(workers, before))


def test_an_infer_tp2_engine_samples_as_tp1_and_each_worker_holds_its_shards(cluster, tmp_path):
    """Inference TP2 (vLLM's mp executor, workers in processes of their own): the same tokens
    as TP1 and log-probs within 1e-4; on CPU the workers are forked from the engine process,
    not spawned (platforms/cpu/vllm_start.py: a spawned one imported vLLM again); the
    fingerprint, combined from each worker's shard digests, equals the checkpoint's before and
    after a sync of other weights; vLLM's shared-memory segments (where this machine's vLLM
    build makes them: AVX-512 kernels) are its own, kept while mapped and gone after shutdown;
    idle workers take no CPU."""
    import ray
    from safetensors.torch import load_file

    from mindrl import device
    from mindrl.ckpt.fingerprint import checkpoint_fingerprint
    from mindrl.platforms.cpu.vllm_shm import (SEGMENTS, mapped_files, sweep_stale_segments,
                                               tp_collectives_use_segments)
    from mindrl.platforms.cpu.vllm_start import QUEUE_RECHECK_MS, queue_recheck_ms
    from mindrl.weight_sync.engine_fanout import EngineFanout

    dirs, one, _, make_tp2 = cluster
    stale = tmp_path / "vllm_dist_killed-tp:0-[0-1]-cpushm_0"   # a killed engine's segment
    stale.write_bytes(b"0" * 64)
    tp2 = make_tp2()
    try:
        tp2.start()
        started = ray.get(tp2.engines[0].describe.remote())["worker_start"]
        assert started == ("fork" if device.is_cpu() else "spawn"), started
        live = [p for p in mapped_files() if os.path.basename(p).startswith("vllm_dist_")]
        if tp_collectives_use_segments():
            assert len(live) >= 2, live              # one segment per TP rank, mapped
        else:                                        # AVX2 build: torch.distributed instead
            assert live == [], live
        assert sweep_stale_segments(min_age_s=0, shm_dir=str(tmp_path)) == [str(stale)]
        assert sweep_stale_segments(min_age_s=0) == []   # live segments stay
        a, b = one.generate(_batch(3), seed=11), tp2.generate(_batch(3), seed=11)
        if device.is_cpu():       # the TP workers sleep between messages, never spin
            assert _idle_cpu_seconds(ray.get(tp2.engines[0].describe.remote())["pid"]) < 0.05
            # ... and look again every 10 ms, not vLLM's 5 s: a dropped notification stalled
            # a TP 2 engine 5 s (platforms/cpu/vllm_start.idle_queue_readers_sleep)
            rechecks = ray.get(tp2.engines[0].__ray_call__.remote(
                lambda engine: [queue_recheck_ms()] + engine.llm.collective_rpc(queue_recheck_ms)))
            assert rechecks == [QUEUE_RECHECK_MS] * 3, rechecks
        assert b.response_lists() == a.response_lists()
        assert (a["rollout_log_probs"] - b["rollout_log_probs"]).abs().max() <= 1e-4
        fanout = EngineFanout(tp2.engines)
        fanout.check_fingerprint(checkpoint_fingerprint(dirs[0]))
        weights = load_file(str(next(dirs[1].glob("*.safetensors"))))
        fanout.load_weights(sorted(weights.items()))
        fanout.check_fingerprint(checkpoint_fingerprint(dirs[1]))
        with pytest.raises(WeightSyncError, match="differ from the expected weights"):
            fanout.check_fingerprint(checkpoint_fingerprint(dirs[0]))
    finally:
        tp2.shutdown()
    left = [p for p in live if os.path.exists(p)]
    assert not left, f"segments left after shutdown: {left} ({SEGMENTS})"


def test_a_dead_engine_is_named(cluster):
    import ray

    _, _, two, _ = cluster
    ray.kill(two.engines[1])
    with pytest.raises(EngineDied, match=r"rollout engine 1 \(actor device 1\) died during "
                                         "generate"):
        two.generate(_batch(2), seed=3)
