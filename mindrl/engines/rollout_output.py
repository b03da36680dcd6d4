"""What a rollout engine answers: n samples per prompt with their sampled log-probs, padded as
the Batch contract says (`RolloutOutput.to_batch`; docs/design.md#the-batch-contract)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import torch

from mindrl.data.batch import left_pad, right_pad


@dataclass
class RolloutOutput:
    """n samples per prompt, prompt-major: sample i belongs to prompt ``prompt_index[i]``."""

    prompt_token_ids: List[List[int]]     # per sample (each prompt repeated n times)
    response_token_ids: List[List[int]]   # generated ids, EOS included when it stopped there
    log_probs: List[List[float]]          # log p(response_token_ids[i][t]) as sampled
    # "stop" (EOS / stop id), "length", or None: stopped by a weight sync (partial rollouts)
    finish_reasons: List[Optional[str]]
    prompt_index: List[int] = field(default_factory=list)
    # Per sample [prompt + response tokens, MoE layers, top-k] expert ids when asked for
    # (engines/vllm_routes.py); -1 at the last token, which the engine never routes.
    routes: Optional[List[torch.Tensor]] = None
    # Per sample, per response token: how many weight versions the engine had taken in when
    # it sampled the token (engines/vllm_inflight.py); None without inflight_sync.
    token_commits: Optional[List[List[int]]] = None
    # Per sample, per response token: 1 where the engine sampled it, 0 where an episode
    # inserted it, and the turn it belongs to (rollout/episode.py); None: every token
    # sampled, in turn 0 (a single turn).
    sampled: Optional[List[List[int]]] = None
    turns: Optional[List[List[int]]] = None

    @classmethod
    def from_results(cls, results: Sequence,
                     routes: Optional[Sequence[List[torch.Tensor]]] = None) -> "RolloutOutput":
        """From vLLM's RequestOutputs (or engines/vllm_stoppable's alike), one per prompt, and
        per prompt its samples' routes where asked for."""
        out = cls([], [], [], [], [], routes=None if routes is None else [])
        for index, result in enumerate(results):
            prompt = list(map(int, result.prompt_token_ids))
            if routes is not None:
                out.routes.extend(routes[index])
            for sample in sorted(result.outputs, key=lambda o: o.index):
                ids = list(sample.token_ids)
                out.prompt_token_ids.append(prompt)
                out.response_token_ids.append(ids)
                out.log_probs.append([sample.logprobs[t][tok].logprob for t, tok in enumerate(ids)])
                out.finish_reasons.append(sample.finish_reason)
                out.prompt_index.append(index)
                versions = getattr(sample, "versions", None)
                if versions is not None:
                    out.token_commits = out.token_commits or []
                    out.token_commits.append(list(versions))
        return out

    def __len__(self) -> int:
        return len(self.response_token_ids)

    def prompt_tensors(self, pad_id: int,
                       length: Optional[int] = None) -> Dict[str, torch.Tensor]:
        ids, mask = left_pad(self.prompt_token_ids, pad_id, length)
        return {"prompt_ids": ids, "prompt_mask": mask}

    def response_tensors(self, pad_id: int,
                         length: Optional[int] = None) -> Dict[str, torch.Tensor]:
        """Right-padded responses; response_mask is 1 up to and including EOS, 0 on padding;
        loss_mask is 1 where the engine sampled the token (`sampled`, per sample and token:
        an episode's inserted tokens are 0), else equal to response_mask; token_turn is each
        token's turn (0 on padding and in a single turn)."""
        ids, mask = right_pad(self.response_token_ids, pad_id, length)
        logp, _ = right_pad(self.log_probs, 0.0, ids.shape[1], dtype=torch.float32)
        if self.sampled is None:
            loss_mask = mask.clone()
        else:
            loss_mask, _ = right_pad(self.sampled, 0, ids.shape[1])
        turns = (torch.zeros_like(mask) if self.turns is None
                 else right_pad(self.turns, 0, ids.shape[1])[0])
        return {"response_ids": ids, "response_mask": mask, "loss_mask": loss_mask,
                "token_turn": turns, "rollout_log_probs": logp}

    def to_batch(self, pad_id: int, prompt_length: Optional[int] = None,
                 response_length: Optional[int] = None) -> Dict[str, torch.Tensor]:
        return {**self.prompt_tensors(pad_id, prompt_length),
                **self.response_tensors(pad_id, response_length)}
