"""Device check on whatever accelerator mindrl.device finds (CUDA, NPU, or CPU), one rank:

    python bench/check_device.py                # parity + fp32/bf16 update timing (3 steps)
    python bench/check_device.py --steps 1 --batch 4   # a quick run (CPU)
    python bench/check_device.py --steps 0      # parity and the vLLM engine, no timing
    python bench/check_device.py --no-rollout   # without the vLLM engine (part 3)
    MINDRL_DEVICE=cpu python bench/check_device.py     # force the CPU on an accelerator box

The device is mindrl.device's choice: MINDRL_DEVICE if set, else an NPU that torch_npu
reports, else CUDA if available, else the CPU; on the CPU every check runs the same way
(except sleep / wake, which vLLM's CPU build does not have).

1. Megatron GPTModel (TP1) vs transformers logits on the same weights, fp32, on the device.
2. MegatronEngine.compute_log_probs vs transformers log-probs of a padded batch, fp32.
3. A vLLM engine on the device, in a child process as a Megatron rank hosts one (tiny-qwen2,
   fp32): its sampled log-probs against transformers' on the same tokens, and, for each sleep
   level the platform has (GPU/NPU: 1 and 2; none on CPU), one sleep / wake cycle as the
   trainer runs it: sleep, wake the weights, load the weights again, verify the sync by
   fingerprints, wake the KV cache, generate the same prompts again.
4. Train-step throughput of a ~100M Qwen2 shape, fp32 vs bf16 (Megatron engine update, the
   baseline measured in the same run), and whether each dtype's grad norm is finite.
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
  sleep<level>_frees_memory   must be true: device memory free after sleep() > before
  sleep<level>_sync_verified  must be true: after the wake and a load, the engine's fingerprints
                              equal the checkpoint's (level 2 discards the weights: peers have
                              generated from garbage after it)
  sleep<level>_same_tokens    must be true: after the wake the same prompts and seeds give the
                              same tokens as before the sleep
The timing figures (update_s_*, tokens_per_s_*, bf16_speedup) have no threshold: they are
measurements, not parity (bf16 can be slower than fp32 on a CPU without bf16 matmul units).
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


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


THRESHOLDS = {"logits_max_diff": 1e-5, "logprob_max_diff": 1e-5, "rollout_logprob_gap": 1e-4}
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3,
                    help="timed update steps per dtype after one warm-up; 0 skips part 4")
    ap.add_argument("--batch", type=int, default=32, help="sequences per update (part 4)")
    ap.add_argument("--no-rollout", action="store_true", help="skip part 3 (the vLLM engine)")
    args = ap.parse_args(argv)
    import torch

    from mindrl import device
    from mindrl.ckpt import mapping
    from mindrl.distributed import free_port
    from mindrl.data.batch import Batch
    from mindrl.engines.megatron_engine import MegatronEngine, OptimConfig
    from mindrl.models.builder import Parallelism, initialize_parallel
    from mindrl.config.model_spec import load_model_spec

    device.init_distributed(0, 1, master_port=free_port())
    dev = device.current_device()
    out = {"bench": "check_device", "device": device.device_type(),
           "backend": device.distributed_backend()}
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
    if not args.no_rollout:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="check_device-") as work_dir:
            out.update(check_rollout_engine(Path(work_dir), dev))

    big = dataclasses.replace(spec, num_layers=8, hidden_size=1024, ffn_hidden_size=2816,
                              num_attention_heads=16, num_query_groups=4, vocab_size=32000)
    B, P, R = args.batch, 64, 192
    for dtype in ("float32", "bfloat16") if args.steps > 0 else ():
        initialize_parallel(Parallelism())
        eng = MegatronEngine(big, Parallelism(), params_dtype=dtype,
                             micro_batch_size=min(8, B),
                             optim=OptimConfig(lr=1e-5))
        bb = Batch.of(**batch(big.vocab_size, B, P, R, dev))
        eng.update(bb, mini_batch_size=B)   # warm-up
        device.synchronize()
        t = time.perf_counter()
        steps = args.steps
        for _ in range(steps):
            metrics = eng.update(bb, mini_batch_size=B)
        device.synchronize()
        sec = (time.perf_counter() - t) / steps
        out[f"update_s_{dtype}"] = sec
        out[f"tokens_per_s_{dtype}"] = B * (P + R) / sec
        out[f"grad_norm_finite_{dtype}"] = bool(torch.isfinite(torch.tensor(metrics["actor/grad_norm"])))
        del eng
        device.empty_cache()
    if args.steps > 0:
        out["bf16_speedup"] = out["update_s_float32"] / out["update_s_bfloat16"]
    print(f"device {out['device']} ({out['backend']})")
    print(f"  logits vs transformers, fp32        max |diff| {out['logits_max_diff']:.2e} "
          f"(limit {THRESHOLDS['logits_max_diff']:g})")
    print(f"  log-probs vs transformers, fp32     max |diff| {out['logprob_max_diff']:.2e} "
          f"(limit {THRESHOLDS['logprob_max_diff']:g})")
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
    if args.steps > 0:
        for dtype in ("float32", "bfloat16"):
            print(f"  update {dtype:9s} {out[f'update_s_{dtype}']:.3f} s/step, "
                  f"{out[f'tokens_per_s_{dtype}']:.0f} tokens/s, grad norm finite: "
                  f"{out[f'grad_norm_finite_{dtype}']}")
        print(f"  bf16 speedup over fp32: {out['bf16_speedup']:.2f}x (no threshold)")
    out["failed"] = failures(out)
    for line in out["failed"]:
        print(f"FAILED: {line}")
    print(json.dumps(out))
    return 1 if out["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
