"""What a model's tokens cost: the FLOP floor the benches compare their seconds with, and the
KV cache vLLM needs for a shape."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class FlopModel:
    """What a token costs: weights it multiplies (2 FLOPs each per forward token; of a
    Mixture-of-Experts layer the router and the top-k experts, its active parameters) and the
    attention's width and depth (4 x q_width FLOPs per layer per position attended)."""
    weights: int
    layers: int
    q_width: int

    @classmethod
    def of(cls, model: str) -> "FlopModel":
        from mindrl.config.model_spec import load_model_spec

        spec = load_model_spec(model)
        q, kv = spec.num_attention_heads * spec.head_dim, spec.num_query_groups * spec.head_dim
        attention = spec.hidden_size * (q + 2 * kv) + q * spec.hidden_size
        return cls(weights=spec.num_layers * attention + spec.mlp_parameters(active=True)
                   + spec.vocab_size * spec.hidden_size,            # + the LM head
                   layers=spec.num_layers, q_width=q)

    def forward(self, length: float) -> float:
        """One causal forward over a sequence of `length` tokens."""
        return 2 * self.weights * length \
            + 4 * self.q_width * self.layers * length * (length + 1) / 2

    def step(self, seq_lengths: Sequence[float]) -> float:
        """Generate every sample (one forward's work) and train on it (forward + backward,
        three forwards' work): no old-log-prob or reference pass, no padding."""
        return sum(4 * self.forward(length) for length in seq_lengths)


def kv_cache_bytes(model: str, rows: int, seq_length: int) -> int:
    """vLLM's KV cache for `rows` sequences at `seq_length` (fp32, 32-token blocks), +25%."""
    from mindrl.config.model_spec import load_model_spec

    spec = load_model_spec(model)
    per_token = 2 * spec.num_layers * spec.num_query_groups * spec.head_dim * 4
    tokens = rows * 32 * math.ceil(seq_length / 32)
    return max(64 * 2**20, math.ceil(1.25 * tokens * per_token / 2**20) * 2**20)
