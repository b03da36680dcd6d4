"""The shapes the end-to-end benches run (bench_e2e against TRL, bench_async's loops at the
natural shape): the model, batch, lengths, steps and threads of each, the hyperparameters every
framework shares, a shape shrunk for a smoke run, and where a shape's model, data and runs
live under the work dir. bench/bench_e2e.py's docstring says what each shape measures."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Tuple


@dataclass(frozen=True)
class Shape:
    name: str
    model: str               # configs/model name
    prompts: int             # per step
    n: int                   # samples per prompt
    max_tokens: int          # completion length (exact when exact_length)
    exact_length: bool
    lr: float
    steps: int
    threads: int             # torch threads per process, both frameworks
    micro_batch: int         # samples per forward/backward micro batch (TRL), the budget's unit
    # the columns run when --frameworks is not given
    frameworks: Tuple[str, ...] = ("mindrl", "trl", "trl_default")
    # bf16 mixed precision in both trainers (fp32 main weights): MindRL's Megatron bf16, TRL's
    # bf16=True; only where the CPU computes in bf16
    bf16: bool = False

    @property
    def completions(self) -> int:
        return self.prompts * self.n

    @property
    def seq_length(self) -> int:
        return SHARED["max_prompt_length"] + self.max_tokens

    @property
    def token_budget(self) -> int:
        """MindRL's packed micro batch: TRL's micro batch at its longest."""
        return self.micro_batch * self.seq_length


SHAPES = {
    "tiny": Shape("tiny", "tiny-qwen2", prompts=16, n=8, max_tokens=3, exact_length=False,
                  lr=1e-3, steps=200, threads=1, micro_batch=16),
    "75m": Shape("75m", "bench-qwen2-75m", prompts=8, n=8, max_tokens=256, exact_length=True,
                 lr=1e-4, steps=6, threads=2, micro_batch=16),
    "natural": Shape("natural", "bench-qwen2-75m", prompts=8, n=8, max_tokens=1024,
                     exact_length=False, lr=1e-4, steps=6, threads=2, micro_batch=16,
                     frameworks=("mindrl", "trl", "trl_default", "trl_cb")),
}
SHAPES["75m_bf16"] = dataclasses.replace(SHAPES["75m"], name="75m_bf16", bf16=True,
                                         frameworks=("mindrl", "trl"))

# Hyperparameters both frameworks get (names: MindRL's recipe keys).
SHARED = dict(temperature=1.0, top_p=1.0, clip_ratio=0.2, kl_coef=0.0, entropy_coeff=0.0,
              adam_beta1=0.9, adam_beta2=0.99, adam_eps=1e-8, weight_decay=0.0, clip_grad=1.0,
              seed=1234, max_prompt_length=24, num_prompts=4096, max_operand=2)

def shrink(shape: Shape, steps: Optional[int] = None, prompts: Optional[int] = None,
           n: Optional[int] = None, max_tokens: Optional[int] = None) -> Shape:
    """A smaller shape for a smoke run; the micro batch shrinks to divide the batch."""
    shape = dataclasses.replace(
        shape, steps=steps or shape.steps, prompts=prompts or shape.prompts, n=n or shape.n,
        max_tokens=max_tokens or shape.max_tokens)
    return dataclasses.replace(shape, micro_batch=math.gcd(shape.micro_batch,
                                                           shape.completions))


def paths(work: Path, shape: Shape) -> Dict[str, Path]:
    return {"hf": work / "models" / f"{shape.model}-hf",
            "mcore": work / "models" / f"{shape.model}-mcore",
            "data": work / "data" / "arith" / "train.jsonl",
            "mindrl_run": work / "runs" / f"mindrl-{shape.name}",
            "trl_run": work / "runs" / f"trl-{shape.name}"}

