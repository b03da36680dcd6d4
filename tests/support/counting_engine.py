"""A stand-in for VLLMEngine.generate in partial-rollout tests (rollout/partial.py): each
sample counts up from its prefix's last id and ends with EOS after 9 ("stop"); cut at
max_tokens otherwise ("length"). Every log-prob is -0.25."""

from mindrl.engines.rollout_output import RolloutOutput

EOS = 2


def count_up(prompts, n, max_tokens, min_tokens=0, seed=None) -> RolloutOutput:
    """`max_tokens` may be a list, a value per prompt (as VLLMEngine.generate takes it)."""
    budgets = max_tokens if isinstance(max_tokens, list) else [max_tokens] * len(prompts)
    ids, reasons = [], []
    for p, max_tokens in zip(prompts, budgets):
        for _ in range(n):
            out = []
            while len(out) < max_tokens and (out or p)[-1] < 9:
                out.append((out or p)[-1] + 1)
            stop = bool(out) and out[-1] == 9 and len(out) < max_tokens
            ids.append(out + [EOS] if stop else out)
            reasons.append("stop" if stop else "length")
    return RolloutOutput([list(p) for p in prompts for _ in range(n)], ids,
                         [[-0.25] * len(x) for x in ids], reasons,
                         [i for i in range(len(prompts)) for _ in range(n)])
