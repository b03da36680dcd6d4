"""Run by tests/models/test_vl_processor.py in a process of its own (vLLM allows one in-process
engine per process): greedy generation with vLLM on CPU from token prompts carrying ONE
<|image_pad|> per image, then a batched run for a throughput figure.

argv: model_dir, JSON [{"prompt_token_ids": [...], "images": [[height, width, seed], ...]}],
max_tokens. Prints one JSON line: per prompt the engine's (expanded) prompt ids, the generated
tokens and their logprobs; and tokens/s of the batched run.
"""

import json
import os
import sys
import time

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"

from mindrl.platforms.cpu.vllm_start import prepare_vllm_process  # noqa: E402

prepare_vllm_process(1)

from vllm import LLM, SamplingParams  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from support.synthetic_images import synthetic_image  # noqa: E402

THROUGHPUT_COPIES = 8


def main():
    model_dir, requests, max_tokens = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    llm = LLM(model=model_dir, dtype="float32", enforce_eager=True, max_model_len=512,
              kv_cache_memory_bytes=64 << 20, enable_prefix_caching=False,
              mm_processor_cache_gb=0, seed=0, logprobs_mode="processed_logprobs")
    prompts = [{"prompt_token_ids": r["prompt_token_ids"],
                "multi_modal_data": {"image": [synthetic_image(*i) for i in r["images"]]}}
               for r in requests]
    greedy = SamplingParams(temperature=0.0, max_tokens=max_tokens, logprobs=0, ignore_eos=True)
    outs = llm.generate(prompts, greedy, use_tqdm=False)
    results = []
    for out in outs:
        sample = out.outputs[0]
        tokens = list(sample.token_ids)
        results.append({"engine_prompt_ids": list(out.prompt_token_ids), "tokens": tokens,
                        "logprobs": [lp[t].logprob for lp, t in zip(sample.logprobs, tokens)]})
    start = time.perf_counter()
    batch = llm.generate(prompts * THROUGHPUT_COPIES, greedy, use_tqdm=False)
    seconds = time.perf_counter() - start
    generated = sum(len(o.outputs[0].token_ids) for o in batch)
    print(json.dumps({"results": results, "tokens_per_s": generated / seconds,
                      "batch_tokens": generated}))


if __name__ == "__main__":
    main()
