"""vLLM's sampled-token log-probs against an independent transformers recomputation: what the
vLLM engine tests compare."""

import torch
from transformers import AutoModelForCausalLM

from mindrl.engines.rollout_output import RolloutOutput


def transformers_log_probs(model_dir, out: RolloutOutput, temperature=1.0):
    """Independent recomputation: one transformers forward per sample."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    rows = []
    with torch.no_grad():
        for prompt, response in zip(out.prompt_token_ids, out.response_token_ids):
            seq = torch.tensor(prompt + response)
            logits = model(seq[None]).logits[0].float() / temperature
            lsm = torch.log_softmax(logits, -1)
            pos = torch.arange(len(response)) + len(prompt) - 1
            rows.append(lsm[pos, torch.tensor(response, dtype=torch.long)].tolist())
    return RolloutOutput(out.prompt_token_ids, out.response_token_ids, rows,
                         out.finish_reasons).response_tensors(pad_id=0)["rollout_log_probs"]


def max_diff(out, ref):
    got = out.response_tensors(pad_id=0)
    return float(((got["rollout_log_probs"] - ref).abs() * got["response_mask"]).max())
