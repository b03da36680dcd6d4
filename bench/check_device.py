"""Device check on whatever accelerator mindrl.device finds (CUDA, NPU, or CPU), one rank:

    python bench/check_device.py                # parity + fp32/bf16 update timing (3 steps)
    python bench/check_device.py --steps 1 --batch 4   # a quick run (CPU)
    python bench/check_device.py --steps 0      # parity only
    MINDRL_DEVICE=cpu python bench/check_device.py     # force the CPU on an accelerator box

The device is mindrl.device's choice: MINDRL_DEVICE if set, else an NPU that torch_npu
reports, else CUDA if available, else the CPU; on the CPU every check runs the same way.

1. Megatron GPTModel (TP1) vs transformers logits on the same weights, fp32, on the device.
2. MegatronEngine.compute_log_probs vs transformers log-probs of a padded batch, fp32.
3. Train-step throughput of a ~100M Qwen2 shape, fp32 vs bf16 (Megatron engine update, the
   baseline measured in the same run), and whether each dtype's grad norm is finite.

Thresholds (THRESHOLDS below); the script exits 1, naming each figure that is out of bounds,
when one is exceeded, else 0:
  logits_max_diff   <= 1e-5   fp32 logits of the same weights (tiny-qwen2): only summation
                              order may differ (measured 0 on CPU; TF32 matmuls on CUDA
                              would exceed it, and should: this is an fp32 parity check)
  logprob_max_diff  <= 1e-5   fp32 log-probs of the response tokens, padding masked out
                              (measured 9.5e-7 on CPU: log_softmax over a 128-token vocab of
                              logits within the bound above)
  grad_norm_finite_<dtype>    must be true for fp32 and bf16 (a NaN/inf grad norm is a bug)
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


THRESHOLDS = {"logits_max_diff": 1e-5, "logprob_max_diff": 1e-5}


def failures(out: dict) -> list:
    """Names of the figures in `out` that break their threshold (THRESHOLDS: at most; the
    grad_norm_finite_* flags: must be true)."""
    bad = [f"{k} = {out[k]:.3g} > {limit:g}" for k, limit in THRESHOLDS.items()
           if not out[k] <= limit]           # `not <=` so that a NaN fails too
    bad += [f"{k} is false" for k, v in out.items()
            if k.startswith("grad_norm_finite_") and not v]
    return bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3,
                    help="timed update steps per dtype after one warm-up; 0 skips part 3")
    ap.add_argument("--batch", type=int, default=32, help="sequences per update (part 3)")
    args = ap.parse_args(argv)
    import torch

    from mindrl import device
    from mindrl.ckpt import mapping
    from mindrl.distributed import free_port
    from mindrl.engines.megatron_engine import MegatronEngine, OptimConfig
    from mindrl.models.builder import Parallelism, initialize_parallel
    from mindrl.models.spec import load_model_spec

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
    lp = engine.compute_log_probs(b)["log_probs"]
    with torch.no_grad():
        refs = []
        for i in range(8):
            p = b["prompt_ids"][i][b["prompt_mask"][i].bool()]
            seq = torch.cat([p, b["response_ids"][i]])
            lsm = torch.log_softmax(hf(seq[None]).logits[0].float(), -1)
            refs.append(lsm[torch.arange(10, device=dev) + len(p) - 1, b["response_ids"][i]])
        ref_lp = torch.stack(refs)
    out["logprob_max_diff"] = ((lp - ref_lp).abs() * b["response_mask"]).max().item()

    big = dataclasses.replace(spec, num_layers=8, hidden_size=1024, ffn_hidden_size=2816,
                              num_attention_heads=16, num_query_groups=4, vocab_size=32000)
    B, P, R = args.batch, 64, 192
    for dtype in ("float32", "bfloat16") if args.steps > 0 else ():
        initialize_parallel(Parallelism())
        eng = MegatronEngine(big, Parallelism(), params_dtype=dtype,
                             micro_batch_size=min(8, B),
                             optim=OptimConfig(lr=1e-5))
        bb = {k: v.to(dev) for k, v in batch(big.vocab_size, B, P, R, dev).items()}
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
