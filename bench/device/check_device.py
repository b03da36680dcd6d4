"""Device check on whatever accelerator mindrl.device finds (CUDA, NPU, or CPU), one rank:

    python bench/device/check_device.py              # parity + fp32/bf16 update timing (3 steps)
    python bench/device/check_device.py --steps 1 --batch 4   # a quick run (CPU)
    python bench/device/check_device.py --steps 0    # parity and the vLLM engine, no timing
    python bench/device/check_device.py --no-rollout # without the vLLM engine (part 3)
    python bench/device/check_device.py --pack-steps 0   # part 5 without its timing
    MINDRL_DEVICE=cpu python bench/device/check_device.py   # force the CPU on an accelerator box
    bash bench/device/gpu_run.sh                     # the one-shot GPU run (no vLLM, no Ray)

The device is mindrl.device's choice: MINDRL_DEVICE if set, else an NPU that torch_npu
reports, else CUDA if available, else the CPU; on the CPU every check runs the same way
(except sleep / wake, which vLLM's CPU build does not have).

1. Megatron GPTModel (TP1) vs transformers logits on the same weights, fp32, on the device.
2. MegatronEngine.compute_log_probs vs transformers log-probs of a padded batch, fp32.
   Where the device computes in bf16, parts 1 and 2 again in bf16 (the fp32 weights rounded
   on both sides): the gaps reported, no threshold.
3. A vLLM engine on the device, in a child process as a Megatron rank hosts one (tiny-qwen2,
   fp32): its sampled log-probs against transformers' on the same tokens, and, for each sleep
   level the platform has (GPU/NPU: 1 and 2; none on CPU), one sleep / wake cycle as the
   trainer runs it: sleep, wake the weights, load the weights again, verify the sync by
   fingerprints, wake the KV cache, generate the same prompts again.
4. Train-step throughput of a ~100M Qwen2 shape, fp32 vs bf16 (Megatron engine update, the
   baseline measured in the same run), and whether each dtype's grad norm is finite.
5. Packed vs padded on the device (MegatronEngine(packed=True, max_tokens_per_micro_batch)),
   one rank TP1, a batch of natural lengths (prompts P/8..P, responses lognormal with a mean
   about 0.3 R, clipped to 1..R: RL completions, most short, a long tail):
   a) fp32, a small GQA Qwen2 shape (hidden 256, 4 heads, 2 KV heads, 4 layers, vocab 1024):
      compute_log_probs packed vs padded (max |diff| over response tokens) and the gradients
      of one forward_backward (max over parameters of the relative norm difference); packed
      fp32 runs exact SDPA per sequence everywhere (no fp32 varlen kernel exists);
   b) the same in bf16, reported beside bf16-vs-fp32 on the padded path (the rounding floor
      the packed figure should sit near), with the attention path that ran packed: "varlen"
      (device.varlen_attention, flash on CUDA) or "sdpa-per-sequence";
   c) one update step (forward_backward + optimizer) of a ~0.5B Qwen2 shape (configs/model
      qwen25-0.5b by default) in bf16 (and fp32 with --pack-fp32): padded rows, micro batch 4,
      against packed rows with a token budget of 4 x the longest sample; median of
      --pack-steps timed steps after one warm-up, step seconds, real tokens/s, the speedup.
Part 5 runs before part 4; --deadline-s skips what is optional (part 4, the fp32 timing of
part 5c) once the run is that old, and --json-out rewrites a JSON file of the figures so far
after every part (a run cut short by a time limit still leaves them).
Not checked here: weights reaching an engine through device IPC handles (no such transport
yet; on a device the sync takes the collective path through host memory).

Thresholds (THRESHOLDS below); the script exits 1, naming each figure that is out of bounds,
when one is exceeded, else 0:
  logits_max_diff   <= 1e-5   fp32 logits of the same weights (tiny-qwen2): only summation
                              order may differ (measured 0 on CPU; TF32 matmuls on CUDA
                              would exceed it, and should: this is an fp32 parity check)
  logprob_max_diff  <= 1e-5   fp32 log-probs of the response tokens, padding masked out
                              (measured 9.5e-7 on CPU: log_softmax over a 128-token vocab of
                              logits within the bound above)
  rollout_logprob_gap <= 1e-4 vLLM's fp32 sampled log-probs vs transformers' on the same tokens
                              (the trainer's rollout/logprob_diff_max; measured 4.8e-7 on CPU)
  grad_norm_finite_<dtype>    must be true for fp32 and bf16 (a NaN/inf grad norm is a bug)
  packed_logprob_max_diff_fp32 <= 1e-5  packed vs padded fp32 log-probs over response tokens
                              (measured 9.5e-7 on CPU at the default part 5 batch: only
                              summation order differs)
  packed_grad_rel_diff_fp32   <= 1e-5  packed vs padded fp32 gradients, the worst parameter's
                              |g_packed - g_padded| / |g_padded| (5.7e-7 on CPU)
  pack_grad_norm_finite_<layout>_<dtype>  must be true (part 5c's timed updates)
  sleep<level>_frees_memory   must be true: device memory free after sleep() > before
  sleep<level>_sync_verified  must be true: after the wake and a load, the engine's fingerprints
                              equal the checkpoint's (level 2 discards the weights: peers have
                              generated from garbage after it)
  sleep<level>_same_tokens    must be true: after the wake the same prompts and seeds give the
                              same tokens as before the sleep
The timing figures (update_s_*, tokens_per_s_*, bf16_speedup, pack_*) and the bf16 packed
figures have no threshold: they are measurements, not parity (bf16 can be slower than fp32 on a
CPU without bf16 matmul units; bf16 results differ by rounding).
Prints a table and a final JSON line (with `failed`: the figures over their threshold).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.common.batches import PACK_MICRO_BATCH, natural_batch, pack_layout  # noqa: E402
from bench.common.results import add_results_argument, emit  # noqa: E402
from bench.common.update_engine import pack_engine, release  # noqa: E402


def hf_model(spec, dev):
    import torch
    import transformers

    cfg = transformers.Qwen2Config(
        vocab_size=spec.vocab_size, hidden_size=spec.hidden_size,
        intermediate_size=spec.ffn_hidden_size, num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_attention_heads, num_key_value_heads=spec.num_query_groups,
        rms_norm_eps=spec.norm_epsilon, tie_word_embeddings=spec.tied_embeddings,
        rope_theta=spec.rotary_base, max_position_embeddings=spec.max_position_embeddings)
    torch.manual_seed(0)
    return transformers.Qwen2ForCausalLM(cfg).to(dev).float().eval()


def batch(vocab, B, P, R, dev, seed=0):
    import torch

    g = torch.Generator().manual_seed(seed)
    pl = torch.randint(1, P + 1, (B,), generator=g)
    rl = torch.randint(1, R + 1, (B,), generator=g)
    pm = (torch.arange(P) >= P - pl[:, None]).long()
    rm = (torch.arange(R) < rl[:, None]).long()
    return {"prompt_ids": torch.randint(1, vocab, (B, P), generator=g) * pm, "prompt_mask": pm,
            "response_ids": torch.randint(1, vocab, (B, R), generator=g) * rm,
            "response_mask": rm, "advantages": torch.randn(B, R, generator=g) * rm}


THRESHOLDS = {"logits_max_diff": 1e-5, "logprob_max_diff": 1e-5, "rollout_logprob_gap": 1e-4,
              "packed_logprob_max_diff_fp32": 1e-5, "packed_grad_rel_diff_fp32": 1e-5}
ROLLOUT_PROMPTS = ("12+34=", "Q: 7*8?\nA:", "hello")


def failures(out: dict) -> list:
    """Names of the figures in `out` that break their threshold (THRESHOLDS: at most; every
    true/false figure: must be true)."""
    bad = [f"{k} = {out[k]:.3g} > {limit:g}" for k, limit in THRESHOLDS.items()
           if k in out and not out[k] <= limit]     # `not <=` so that a NaN fails too
    bad += [f"{k} is false" for k, v in out.items() if isinstance(v, bool) and not v]
    return bad


def hf_response_log_probs(hf, prompt, response):
    """transformers' log-probs of each response token after the prompt (1-D tensors), one
    unpadded forward: the reference every part compares with."""
    import torch

    with torch.no_grad():
        lsm = torch.log_softmax(hf(torch.cat([prompt, response])[None]).logits[0].float(), -1)
    pos = torch.arange(len(response), device=lsm.device) + len(prompt) - 1
    return lsm[pos, response]


def rollout_logprob_gap(hf, rollout, dev) -> float:
    """Largest |vLLM log-prob - transformers log-prob| over every sampled token."""
    import torch

    gap = 0.0
    for prompt, response, got in zip(rollout.prompt_token_ids, rollout.response_token_ids,
                                     rollout.log_probs):
        if response:
            ref = hf_response_log_probs(hf, torch.tensor(prompt, device=dev),
                                        torch.tensor(response, device=dev)).cpu()
            gap = max(gap, (ref - torch.tensor(got)).abs().max().item())
    return gap


def check_rollout_engine(work_dir: Path, dev) -> dict:
    """Part 3: the figures of one vLLM engine per sleep level the platform has (see the
    module docstring)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mindrl import device
    from mindrl.ckpt.hf_io import HFWeights
    from mindrl.config.schema import GenerateConfig, SamplingConfig
    from mindrl.engines.vllm_process import VLLMEngineProcess
    from mindrl.ckpt.fingerprint import fingerprint_tensors
    from mindrl.models.tiny import make_tiny_model

    model_dir = make_tiny_model("tiny-qwen2", "char", work_dir / "tiny-qwen2", seed=0,
                                overwrite=True)
    tok = AutoTokenizer.from_pretrained(model_dir)
    prompts = [tok.encode(text) for text in ROLLOUT_PROMPTS]
    with HFWeights.open(model_dir) as checkpoint:
        weights = [(name, checkpoint.get(name)) for name in checkpoint.names()]
    expected = fingerprint_tensors(weights, torch.float32)
    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(dev).eval()
    out = {}
    for level in (1, 2) if device.engines_can_sleep() else (0,):
        cfg = GenerateConfig(dtype="float32", max_num_seqs=16, max_model_len=128,
                             kv_cache_memory_bytes=64 * 2**20, gpu_memory_utilization=0.3,
                             sleep_level=level,
                             sampling_config=SamplingConfig(max_tokens=16, seed=0))
        engine = VLLMEngineProcess(model_dir, cfg, seed=0)
        try:
            before = engine.generate(prompts, n=2)
            out.setdefault("rollout_logprob_gap", rollout_logprob_gap(hf, before, dev))
            if level == 0:
                continue
            free = device.free_memory_bytes()
            slept = engine.sleep()
            freed = device.free_memory_bytes() - free
            out[f"sleep{level}_freed_gib"] = freed / 2**30
            out[f"sleep{level}_frees_memory"] = bool(slept and freed > 0)
            engine.wake_up(["weights"])
            engine.load_weights(weights)
            try:
                engine.check_fingerprint(expected)
                out[f"sleep{level}_sync_verified"] = True
            except Exception as exc:                 # a figure, not a crash: report it
                out[f"sleep{level}_sync_verified"] = False
                out[f"sleep{level}_sync_error"] = str(exc).splitlines()[0]
            engine.wake_up(["kv_cache"])
            after = engine.generate(prompts, n=2)
            out[f"sleep{level}_same_tokens"] = \
                after.response_token_ids == before.response_token_ids
        finally:
            engine.close()
    del hf
    device.empty_cache()
    return out


PACK_SHAPE = dict(num_layers=4, hidden_size=256, ffn_hidden_size=704, num_attention_heads=4,
                  num_query_groups=2, vocab_size=1024)   # part 5a/b: small, GQA, head dim 64


def _relative(a, b) -> float:
    return ((a - b).norm() / b.norm().clamp(min=1e-12)).item()


def packed_vs_padded(spec, b: dict) -> dict:
    """Part 5a/b: log-probs and one forward_backward's gradients (fp32 main grads) of the
    same weights, padded vs packed, in fp32 and bf16; bf16 padded vs fp32 padded as the
    rounding floor."""
    import torch

    from mindrl import device
    from mindrl.data.batch import Batch

    layout = pack_layout(b)
    mask = b["response_mask"].float()
    weights, res = None, {}
    for dtype in ("float32", "bfloat16"):
        for name, budget in (("padded", None), ("packed", layout["budget"])):
            eng = pack_engine(spec, dtype, budget)
            if weights is None:
                weights = {k: v.detach().clone() for k, v in eng.module.state_dict().items()
                           if isinstance(v, torch.Tensor)}
            else:
                eng.module.load_state_dict(weights, strict=True)
                eng.optimizer.reload_model_params()
            lp = eng.compute_log_probs(Batch.of(**b))["log_probs"].float().cpu()
            eng.forward_backward(Batch.of(**b))
            grads = {n: p.main_grad.detach().float().cpu().clone()
                     for n, p in eng.module.named_parameters()}
            res[dtype, name] = lp, grads
            del eng
            release()
    out = {"pack_check_samples": len(mask), "pack_check_real_tokens": layout["real_tokens"],
           "pack_check_padded_tokens": layout["padded_tokens"]}
    for dtype, short in (("float32", "fp32"), ("bfloat16", "bf16")):
        (lp_pad, g_pad), (lp_pack, g_pack) = res[dtype, "padded"], res[dtype, "packed"]
        out[f"packed_logprob_max_diff_{short}"] = ((lp_pack - lp_pad).abs() * mask).max().item()
        out[f"packed_grad_rel_diff_{short}"] = max(_relative(g_pack[n], g_pad[n]) for n in g_pad)
        path = "varlen" if device.varlen_attention(getattr(torch, dtype)) else "sdpa-per-sequence"
        out[f"packed_attention_{short}"] = path
    (lp16, g16), (lp32, g32) = res["bfloat16", "padded"], res["float32", "padded"]
    out["bf16_vs_fp32_logprob_max_diff"] = ((lp16 - lp32).abs() * mask).max().item()
    out["bf16_vs_fp32_grad_rel_diff"] = max(_relative(g16[n], g32[n]) for n in g32)
    return out


def timed_update(eng, batch, steps: int):
    """Median seconds of `steps` update steps (forward_backward + optimizer over the whole
    batch as one mini batch) after one warm-up, and the last step's metrics."""
    import statistics

    from mindrl import device

    metrics = eng.update(batch, mini_batch_size=len(batch))   # warm-up (kernels, allocator)
    times = []
    for _ in range(steps):
        device.synchronize()
        t = time.perf_counter()
        metrics = eng.update(batch, mini_batch_size=len(batch))
        device.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times), metrics


def packed_timing(spec, b: dict, dtype: str, steps: int) -> dict:
    """Part 5c for one dtype: padded rows (micro batch PACK_MICRO_BATCH) vs packed rows (the
    token budget), the same batch, weights initialised from the same seed."""
    import math

    from mindrl.data.batch import Batch
    from mindrl.data.rows.plans import plan_by_tokens

    layout = pack_layout(b)
    out = {"pack_timing_budget": layout["budget"],
           "pack_timing_packed_micro_batches": len(plan_by_tokens(layout["lengths"], 1,
                                                                  layout["budget"])[0]),
           "pack_timing_padded_micro_batches": len(layout["lengths"]) // PACK_MICRO_BATCH}
    for name, budget in (("padded", None), ("packed", layout["budget"])):
        eng = pack_engine(spec, dtype, budget)
        sec, metrics = timed_update(eng, Batch.of(**b), steps)
        out[f"pack_step_s_{name}_{dtype}"] = sec
        out[f"pack_tokens_per_s_{name}_{dtype}"] = layout["real_tokens"] / sec
        out[f"pack_grad_norm_finite_{name}_{dtype}"] = math.isfinite(metrics["actor/grad_norm"])
        del eng
        release()
    out[f"pack_speedup_{dtype}"] = (out[f"pack_step_s_padded_{dtype}"]
                                    / out[f"pack_step_s_packed_{dtype}"])
    return out


def update_throughput(spec, dtype: str, B: int, steps: int) -> dict:
    """Part 4 for one dtype: seconds per update of B sequences (64 + 192 tokens)."""
    import torch

    from mindrl import device
    from mindrl.data.batch import Batch
    from mindrl.engines.megatron_engine import MegatronEngine, OptimConfig
    from mindrl.models.builder import Parallelism, initialize_parallel

    P, R = 64, 192
    initialize_parallel(Parallelism())
    eng = MegatronEngine(spec, Parallelism(), params_dtype=dtype, micro_batch_size=min(8, B),
                         optim=OptimConfig(lr=1e-5))
    bb = Batch.of(**batch(spec.vocab_size, B, P, R, None))
    eng.update(bb, mini_batch_size=B)   # warm-up
    device.synchronize()
    t = time.perf_counter()
    for _ in range(steps):
        metrics = eng.update(bb, mini_batch_size=B)
    device.synchronize()
    sec = (time.perf_counter() - t) / steps
    del eng
    release()
    return {f"update_s_{dtype}": sec, f"tokens_per_s_{dtype}": B * (P + R) / sec,
            f"grad_norm_finite_{dtype}": bool(torch.isfinite(torch.tensor(
                metrics["actor/grad_norm"])))}


def parity_with_transformers(dev) -> dict:
    """Parts 1 and 2 (tiny-qwen2, fp32)."""
    import torch

    from mindrl import device
    from mindrl.ckpt import mapping
    from mindrl.config.model_spec import load_model_spec
    from mindrl.data.batch import Batch
    from mindrl.engines.megatron_engine import MegatronEngine
    from mindrl.models.builder import Parallelism, initialize_parallel

    out = {}
    spec = load_model_spec("tiny-qwen2")
    initialize_parallel(Parallelism())
    hf = hf_model(spec, dev)
    engine = MegatronEngine(spec, Parallelism(), micro_batch_size=4)
    full = mapping.full_mcore_from_hf({k: v.cpu() for k, v in hf.state_dict().items()}, spec)
    engine.module.load_state_dict(mapping.stage_state_dict(full, spec, 0, 1, 0, 1), strict=False)
    tokens = torch.randint(0, spec.vocab_size, (4, 16), device=dev)
    pos = torch.arange(16, device=dev)[None].expand(4, -1)
    with torch.no_grad():
        mc = engine.module(tokens, pos, None)[..., :spec.vocab_size]
        ref = hf(tokens).logits
    out["logits_max_diff"] = (mc - ref).abs().max().item()
    b = {k: v.to(dev) for k, v in batch(spec.vocab_size, 8, 6, 10, dev).items()}
    lp = engine.compute_log_probs(Batch.of(**b))["log_probs"]
    ref_lp = torch.stack([hf_response_log_probs(hf, b["prompt_ids"][i][b["prompt_mask"][i].bool()],
                                                b["response_ids"][i]) for i in range(8)])
    out["logprob_max_diff"] = ((lp - ref_lp).abs() * b["response_mask"]).max().item()
    if device.bf16_supported():
        out.update(bf16_parity(spec, hf, full, tokens, pos, b))
    return out


def bf16_parity(spec, hf, full, tokens, pos, b) -> dict:
    """Part 1/2 in bf16: the same fp32 weights rounded to bf16 on both sides (transformers'
    own bf16 model, Megatron built in bf16), logits and response log-probs (Megatron's in
    fp32 from its bf16 logits, as in training). Reported, no threshold: the two sides round
    differently (fused vs unfused kernels), and the rounding floor is bf16's own."""
    import torch

    from mindrl.ckpt import mapping
    from mindrl.data.batch import Batch
    from mindrl.engines.megatron_engine import MegatronEngine
    from mindrl.models.builder import Parallelism

    hf16 = hf.to(torch.bfloat16)         # in place: the fp32 checks are done
    engine = MegatronEngine(spec, Parallelism(), micro_batch_size=4, params_dtype="bfloat16")
    loaded = engine.module.load_state_dict(mapping.stage_state_dict(full, spec, 0, 1, 0, 1),
                                           strict=False)
    if loaded.unexpected_keys:
        raise RuntimeError(f"bf16 parity: keys the model lacks: {loaded.unexpected_keys[:5]}")
    with torch.no_grad():
        mc = engine.module(tokens, pos, None)[..., :spec.vocab_size].float()
        ref = hf16(tokens).logits.float()
    lp = engine.compute_log_probs(Batch.of(**b))["log_probs"].float()
    ref_lp = torch.stack([hf_response_log_probs(hf16, b["prompt_ids"][i][b["prompt_mask"][i].bool()],
                                                b["response_ids"][i]) for i in range(len(lp))])
    out = {"logits_max_diff_bf16": (mc - ref).abs().max().item(),
           "logits_scale_bf16": ref.abs().max().item(),
           "logprob_max_diff_bf16": ((lp - ref_lp).abs() * b["response_mask"]).max().item()}
    return out


def print_table(out: dict) -> None:
    print(f"device {out['device']} ({out['backend']}), torch {out['torch']}")
    print(f"  logits vs transformers, fp32        max |diff| {out['logits_max_diff']:.2e} "
          f"(limit {THRESHOLDS['logits_max_diff']:g})")
    print(f"  log-probs vs transformers, fp32     max |diff| {out['logprob_max_diff']:.2e} "
          f"(limit {THRESHOLDS['logprob_max_diff']:g})")
    if "logits_max_diff_bf16" in out:
        print(f"  vs transformers, bf16 (no limit)    logits max |diff| "
              f"{out['logits_max_diff_bf16']:.2e} (of |logits| up to "
              f"{out['logits_scale_bf16']:.2f}), log-probs {out['logprob_max_diff_bf16']:.2e}")
    if "rollout_logprob_gap" in out:
        print(f"  vLLM log-probs vs transformers      max |diff| {out['rollout_logprob_gap']:.2e} "
              f"(limit {THRESHOLDS['rollout_logprob_gap']:g})")
        levels = sorted({int(k[5]) for k in out if k.startswith("sleep")})
        for level in levels:
            print(f"  sleep level {level}: freed {out[f'sleep{level}_freed_gib']:.2f} GiB, "
                  f"sync verified after wake: {out[f'sleep{level}_sync_verified']}, "
                  f"same tokens after wake: {out[f'sleep{level}_same_tokens']}")
        if not levels:
            print("  sleep / wake: not on this platform (vLLM's CPU build cannot sleep)")
    for dtype in ("float32", "bfloat16"):
        if f"update_s_{dtype}" in out:
            print(f"  update {dtype:9s} {out[f'update_s_{dtype}']:.3f} s/step, "
                  f"{out[f'tokens_per_s_{dtype}']:.0f} tokens/s, grad norm finite: "
                  f"{out[f'grad_norm_finite_{dtype}']}")
    if "bf16_speedup" in out:
        print(f"  bf16 speedup over fp32: {out['bf16_speedup']:.2f}x (no threshold)")
    if "packed_logprob_max_diff_fp32" in out:
        print(f"  packed vs padded ({out['pack_check_samples']} samples, "
              f"{out['pack_check_real_tokens']} real of {out['pack_check_padded_tokens']} "
              f"padded tokens):")
        for short in ("fp32", "bf16"):
            limit = THRESHOLDS.get(f"packed_logprob_max_diff_{short}")
            print(f"    {short} log-probs max |diff| "
                  f"{out[f'packed_logprob_max_diff_{short}']:.2e}, grads max rel "
                  f"{out[f'packed_grad_rel_diff_{short}']:.2e} "
                  f"({'limit %g' % limit if limit else 'no limit'}; attention "
                  f"{out[f'packed_attention_{short}']})")
        print(f"    bf16 vs fp32 padded (rounding floor): log-probs "
              f"{out['bf16_vs_fp32_logprob_max_diff']:.2e}, grads max rel "
              f"{out['bf16_vs_fp32_grad_rel_diff']:.2e}")
    for dtype in ("bfloat16", "float32"):
        if f"pack_speedup_{dtype}" in out:
            print(f"  update step {dtype} {out['pack_timing_model']} ({out['pack_timing_samples']}"
                  f" samples, {out['pack_timing_real_tokens']} real / "
                  f"{out['pack_timing_padded_tokens']} padded tokens): padded "
                  f"{out[f'pack_step_s_padded_{dtype}']:.3f} s "
                  f"({out[f'pack_tokens_per_s_padded_{dtype}']:.0f} real tokens/s), packed "
                  f"{out[f'pack_step_s_packed_{dtype}']:.3f} s "
                  f"({out[f'pack_tokens_per_s_packed_{dtype}']:.0f}), speedup "
                  f"{out[f'pack_speedup_{dtype}']:.2f}x")
    for line in out.get("skipped", []):
        print(f"  skipped: {line}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3,
                    help="timed update steps per dtype after one warm-up; 0 skips part 4")
    ap.add_argument("--batch", type=int, default=32, help="sequences per update (part 4)")
    ap.add_argument("--no-rollout", action="store_true", help="skip part 3 (the vLLM engine)")
    ap.add_argument("--pack-samples", type=int, default=16, help="part 5a/b batch size")
    ap.add_argument("--pack-prompt", type=int, default=64, help="part 5a/b longest prompt")
    ap.add_argument("--pack-response", type=int, default=200,
                    help="part 5a/b longest response")
    ap.add_argument("--pack-steps", type=int, default=3,
                    help="part 5c timed steps per layout after one warm-up; 0 skips 5c")
    ap.add_argument("--pack-model", default="qwen25-0.5b",
                    help="part 5c model shape (configs/model), random weights")
    ap.add_argument("--pack-timing-samples", type=int, default=64)
    ap.add_argument("--pack-timing-prompt", type=int, default=128)
    ap.add_argument("--pack-timing-response", type=int, default=1024)
    ap.add_argument("--pack-fp32", action="store_true", help="part 5c in fp32 as well")
    ap.add_argument("--deadline-s", type=float, default=None,
                    help="skip the optional parts (4, 5c fp32) once the run is this old")
    ap.add_argument("--json-out", type=Path, default=None,
                    help="rewrite this JSON file with the figures so far after every part")
    add_results_argument(ap)
    args = ap.parse_args(argv)
    start = time.monotonic()
    import platform

    import torch

    from mindrl import device
    from mindrl.config.model_spec import load_model_spec

    device.init_distributed(0, 1)
    dev = device.current_device()
    out = {"bench": "check_device", "device": device.device_type(),
           "backend": device.distributed_backend(), "torch": torch.__version__,
           "cuda": torch.version.cuda, "python": platform.python_version(),
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "torch_compile": "off" if os.environ.get("TORCHDYNAMO_DISABLE") == "1" else "on",
           "skipped": []}

    def done_part():
        out["elapsed_s"] = round(time.monotonic() - start, 1)
        if args.json_out is not None:
            tmp = args.json_out.with_suffix(".tmp")
            tmp.write_text(json.dumps(dict(out, failed=failures(out))) + "\n")
            tmp.replace(args.json_out)

    def in_time(what: str) -> bool:
        if args.deadline_s is None or time.monotonic() - start < args.deadline_s:
            return True
        out["skipped"].append(f"{what} (run older than --deadline-s {args.deadline_s:g})")
        return False

    out.update(parity_with_transformers(dev))
    done_part()
    if not args.no_rollout:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="check_device-") as work_dir:
            out.update(check_rollout_engine(Path(work_dir), dev))
        done_part()

    small = dataclasses.replace(load_model_spec("tiny-qwen2"), **PACK_SHAPE)
    out.update(packed_vs_padded(small, natural_batch(
        small.vocab_size, args.pack_samples, args.pack_prompt, args.pack_response, seed=5)))
    done_part()
    if args.pack_steps > 0:
        spec = load_model_spec(args.pack_model)
        longest = args.pack_timing_prompt + args.pack_timing_response
        spec = dataclasses.replace(spec, max_position_embeddings=max(
            spec.max_position_embeddings, longest))
        b = natural_batch(spec.vocab_size, args.pack_timing_samples, args.pack_timing_prompt,
                          args.pack_timing_response, seed=7)
        layout = pack_layout(b)
        out.update({"pack_timing_model": args.pack_model,
                    "pack_timing_samples": args.pack_timing_samples,
                    "pack_timing_real_tokens": layout["real_tokens"],
                    "pack_timing_padded_tokens": layout["padded_tokens"]})
        out.update(packed_timing(spec, b, "bfloat16", args.pack_steps))
        done_part()
        if args.pack_fp32 and in_time("part 5c fp32"):
            out.update(packed_timing(spec, b, "float32", args.pack_steps))
            done_part()

    big = dataclasses.replace(load_model_spec("tiny-qwen2"), num_layers=8, hidden_size=1024,
                              ffn_hidden_size=2816, num_attention_heads=16, num_query_groups=4,
                              vocab_size=32000)
    if args.steps > 0 and in_time("part 4"):
        for dtype in ("float32", "bfloat16"):
            out.update(update_throughput(big, dtype, args.batch, args.steps))
        out["bf16_speedup"] = out["update_s_float32"] / out["update_s_bfloat16"]
    print_table(out)
    out["failed"] = failures(out)
    done_part()
    for line in out["failed"]:
        print(f"FAILED: {line}")
    emit(out, results=args.results)
    return 1 if out["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
