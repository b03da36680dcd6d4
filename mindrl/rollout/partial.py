"""Partial rollouts (rl_config.partial_rollout_tokens): a batch generated in chunks of at most
K new tokens per sample, so that a weight sync can fall between two chunks instead of waiting
for the longest generation (issue 40 item 3, abort-and-resume with the prefix).

The first chunk asks the engine for the prompts' n samples with max_tokens = K; a sample not
finished after a chunk continues in the next from its own prefix (prompt + its tokens so far)
as a one-sample request (n=1: each sample now has a prefix of its own) with max_tokens = what
remains, at most K. Its new tokens and their sampled log-probs are appended, each token
recording the weights version that sampled it. A chunk a weight sync stopped mid-way
(engines/vllm_stoppable.py) leaves its samples with fewer tokens and no finish reason: they
continue the same way. A finished sample (EOS / stop, its max_tokens reached, or a chunk cut
short by the engine's context length) is never continued.

Prompts with images continue as they started: the one-pad-per-image prompt ids plus the tokens
so far, with the same images (vLLM expands the pads again, and the generated tokens follow as
text); the rollout reports the prompt ids vLLM ran for the first chunk, pads expanded, which is
what the trainer's batch must equal.

Greedy continuation from the prefix gives the whole generation's tokens and log-probs
(tests/engines/test_partial_rollout.py, tests/rollout/test_vision_rollout.py); a seeded
sampler's random stream restarts at each chunk (chunk c's requests use seeds
seed + c * samples + j), so a sampled chunked rollout is a different draw from the whole one,
from the same distribution.

The same bookkeeping runs an episode (rollout/episode.py) of several turns: when a call ends
on its own (EOS / stop) the episode may answer ids to insert; they are appended (kind
INSERTED, log-prob 0, the calling turn's version), the turn count goes up and the sample
continues from its prefix. The episode's `max_tokens` counts both kinds, so an episode ends
"length" when its budget runs out. A continued call must run exactly the prefix sent (the
engine's reported prompt ids are compared: token in, token out).

`PartialRollout` is the bookkeeping alone (pure Python, tested with hand-made chunks);
`generate_in_chunks` drives any engine `generate` through it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from mindrl.engines.rollout_output import RolloutOutput
from mindrl.rollout.episode import INSERTED, SAMPLED, Episode, SingleTurn, TurnEnd


@dataclass
class PartialSample:
    """One sample's rollout so far: its prompt, tokens, their log-probs and the weights
    version that sampled each; `finish_reason` is None while it continues."""

    prompt: List[int]
    prompt_index: int
    tokens: List[int] = field(default_factory=list)
    log_probs: List[float] = field(default_factory=list)
    versions: List[int] = field(default_factory=list)
    kinds: List[int] = field(default_factory=list)     # SAMPLED / INSERTED, per token
    turns: List[int] = field(default_factory=list)     # the episode turn, per token
    turn: int = 0
    calls: int = 0                           # engine calls answered so far
    finish_reason: Optional[str] = None
    ran_prompt: Optional[List[int]] = None   # the engine's prompt ids at the first chunk

    def append(self, ids: Sequence[int], log_probs: Sequence[float], version,
               kind: int) -> None:
        """`version`: one for every id, or a list of one per id (an in-flight sync's)."""
        self.tokens.extend(map(int, ids))
        self.log_probs.extend(map(float, log_probs))
        self.versions.extend([version] * len(ids) if isinstance(version, int)
                             else list(map(int, version)))
        self.kinds.extend([kind] * len(ids))
        self.turns.extend([self.turn] * len(ids))

    @property
    def prefix(self) -> List[int]:
        """What the next chunk continues from: the prompt and every token generated."""
        return self.prompt + self.tokens


@dataclass
class Chunk:
    """One engine call of a chunk: the samples it continues (indices into the rollout), the
    prompt ids to send, samples per prompt, the sampling overrides (max_tokens and min_tokens,
    one value or a list of one per prompt, and a seed for that call) and each prompt's images
    (None: text prompts)."""

    samples: List[int]
    prompts: List[List[int]]
    n: int
    overrides: Dict[str, int]
    images: Optional[List[tuple]] = None

    def engine_kwargs(self) -> Dict:
        """What `generate` takes besides the prompts and n."""
        return {**self.overrides, **({} if self.images is None else {"images": self.images})}


class PartialRollout:
    """n samples per prompt, prompt-major, generated `chunk` tokens at a time up to
    `max_tokens` each; `min_tokens` (no EOS before that many) counts over all chunks;
    `images[i]`: prompt i's images (None: text prompts); `episode`: what runs between two
    calls (default SingleTurn: nothing); `first_sample`: the index its first sample has in
    the submitted batch (an engine's part of it starts there), what TurnEnd.sample counts
    from."""

    def __init__(self, prompts: Sequence[Sequence[int]], n: int, max_tokens: int, chunk: int,
                 min_tokens: int = 0, images: Optional[Sequence[tuple]] = None,
                 episode: Optional[Episode] = None, first_sample: int = 0):
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk <= 0:
            raise ValueError(f"chunk must be an integer > 0, got {chunk!r}")
        if images is not None and len(images) != len(prompts):
            raise ValueError(f"{len(images)} image lists for {len(prompts)} prompts")
        self.images = None if images is None else [tuple(i) for i in images]
        self.prompts = [list(map(int, p)) for p in prompts]
        self.n, self.max_tokens, self.chunk, self.min_tokens = n, max_tokens, chunk, min_tokens
        self.episode = episode or SingleTurn()
        self.first_sample = first_sample
        self._turn_ended: List[Tuple[int, int]] = []   # (sample, version) since the chunk began
        self.samples = [PartialSample(list(p), i) for i, p in enumerate(self.prompts)
                        for _ in range(n)]
        self.chunks_done = 0

    @property
    def done(self) -> bool:
        """Whether every sample has finished."""
        return all(s.finish_reason is not None for s in self.samples)

    def pending(self) -> List[int]:
        """The samples the next chunk continues, in order."""
        return [i for i, s in enumerate(self.samples) if s.finish_reason is None]

    def next_calls(self, seed: Optional[int] = None) -> List[Chunk]:
        """The engine calls of the next chunk: the first is the prompts with n samples each;
        later, one call continues every pending sample alone from its prefix (n=1), each with
        its own max_tokens and min_tokens (lists, a value per prompt: after a sync stopped a
        chunk mid-way the samples hold different counts, and one call keeps them in one
        batch). With a base `seed`, chunk c's calls seed from seed + c * samples on, one seed
        per sample sent."""
        if self.chunks_done == 0:
            calls = [Chunk(list(range(len(self.samples))), [list(p) for p in self.prompts],
                           self.n, self._limits(0), self.images)]
        elif not self.pending():
            calls = []
        else:
            pending = self.pending()
            limits = [self._limits(len(self.samples[i].tokens)) for i in pending]
            calls = [Chunk(pending, [self.samples[i].prefix for i in pending], 1,
                           {name: [one[name] for one in limits] for name in limits[0]},
                           None if self.images is None else
                           [self.images[self.samples[i].prompt_index] for i in pending])]
        if seed is not None:
            first = seed + self.chunks_done * len(self.samples)
            for call in calls:
                call.overrides = {**call.overrides, "seed": first}
                first += len(call.samples)
        return calls

    def _limits(self, have: int) -> Dict[str, int]:
        return {"max_tokens": min(self.chunk, self.max_tokens - have),
                "min_tokens": max(0, min(self.min_tokens - have, self.chunk))}

    def record(self, call: Chunk, output, version: int,
               token_versions: Optional[Sequence[Sequence[int]]] = None) -> None:
        """Append one call's answer (a RolloutOutput or alike: response_token_ids, log_probs,
        finish_reasons, one row per sample of `call`, in its order), sampled on weights
        `version`, or on `token_versions` (per row, a version per token: an engine that took
        weights in while generating). A sample continues only where the engine cut it short
        (at this chunk's max_tokens, or stopped by a sync: finish reason None) and its own
        max_tokens is not reached."""
        if len(output.response_token_ids) != len(call.samples):
            raise ValueError(f"{len(output.response_token_ids)} rows answer a chunk of "
                             f"{len(call.samples)} samples")
        asked = call.overrides["max_tokens"]
        if not isinstance(asked, list):          # the first chunk: one budget for all
            asked = [asked] * len(call.samples)
        ran = getattr(output, "prompt_token_ids", None) or [None] * len(call.samples)
        sampled_on = token_versions or [version] * len(call.samples)
        for index, ids, logps, reason, prompt, budget, on in zip(
                call.samples, output.response_token_ids, output.log_probs,
                output.finish_reasons, ran, asked, sampled_on):
            sample = self.samples[index]
            if sample.calls == 0 and prompt is not None:
                sample.ran_prompt = list(map(int, prompt))
            elif prompt is not None and self.images is None and \
                    list(map(int, prompt)) != sample.prefix:
                raise ValueError(f"sample {index}: the engine ran {len(prompt)} prompt ids, "
                                 f"not the {len(sample.prefix)} of its prefix (prompt + every "
                                 f"token so far): a continued call must run exactly what the "
                                 f"last one sampled plus what was inserted")
            if sample.finish_reason is not None:
                raise ValueError(f"sample {index} has finished ({sample.finish_reason}): it is "
                                 f"never continued")
            if len(ids) != len(logps):
                raise ValueError(f"sample {index}: {len(ids)} tokens, {len(logps)} log-probs")
            sample.append(ids, logps, on, SAMPLED)
            sample.calls += 1
            cut = reason is None or (reason == "length" and len(ids) == budget)
            if not cut and reason == "stop" and len(sample.tokens) < self.max_tokens \
                    and self.episode.multi_turn:
                # the episode decides; its inserted ids carry the calling turn's version
                self._turn_ended.append((index, sample.versions[-1] if sample.versions
                                         else version))
            elif not cut or len(sample.tokens) >= self.max_tokens:
                sample.finish_reason = reason or "length"

    def end_chunk(self) -> None:
        """Every call of the chunk is recorded: the episode answers every turn that ended on
        its own, at once (a batch of tool calls, not one at a time). A sample it answers gets
        the ids inserted (cut at the budget) and begins its next turn; the others are done."""
        ended = self.take_ended()
        if ended:
            self.answer(ended, self.episode.between(self.turn_ends(ended)))
        self.chunks_done += 1

    def take_ended(self) -> List[Tuple[int, int]]:
        """The (sample, version) of the turns that ended on their own since the last take:
        what the episode is asked about next."""
        ended, self._turn_ended = self._turn_ended, []
        return ended

    def turn_ends(self, ended: Sequence[Tuple[int, int]]) -> List[TurnEnd]:
        """The episode's view of these ended turns."""
        return [TurnEnd(self.samples[i].prompt, self.samples[i].tokens, self.samples[i].kinds,
                        self.samples[i].turn, self.first_sample + i) for i, _ in ended]

    def answer(self, ended: Sequence[Tuple[int, int]],
               answers: Sequence[Optional[Sequence[int]]]) -> None:
        """The episode's answers to these ended turns: ids to insert (cut at the budget; the
        sample begins its next turn) or None (the sample is done)."""
        if len(answers) != len(ended):
            raise ValueError(f"the episode answered {len(answers)} of {len(ended)} turns")
        for (index, version), inserted in zip(ended, answers):
            sample = self.samples[index]
            if inserted is None:
                sample.finish_reason = "stop"
                continue
            room = self.max_tokens - len(sample.tokens)
            kept = list(inserted)[:room]
            sample.append(kept, [0.0] * len(kept), version, INSERTED)
            sample.turn += 1
            if len(sample.tokens) >= self.max_tokens:
                sample.finish_reason = "length"

    def calls_for(self, samples: Sequence[int], seed: Optional[int] = None) -> Chunk:
        """One engine call continuing these unfinished samples, each alone from its prefix
        (n=1) with its own budget, whatever the others do (rollout/interleaved.py). With a base
        `seed`, sample i's k-th call (k >= 1) seeds from seed + k * samples + i: a sample's
        draws do not depend on which others share its call."""
        samples = list(samples)
        for i in samples:
            if self.samples[i].finish_reason is not None or self.samples[i].calls == 0:
                raise ValueError(f"sample {i} is finished or has not begun: not continued")
        limits = [self._limits(len(self.samples[i].tokens)) for i in samples]
        overrides = {name: [one[name] for one in limits] for name in limits[0]}
        if seed is not None:
            total = len(self.samples)
            overrides["seed"] = [seed + self.samples[i].calls * total + i for i in samples]
        return Chunk(samples, [self.samples[i].prefix for i in samples], 1, overrides,
                     None if self.images is None else
                     [self.images[self.samples[i].prompt_index] for i in samples])

    def output(self) -> RolloutOutput:
        """The whole rollout as one engine's answer: the original prompts, prompt-major."""
        if not self.done:
            raise ValueError(f"samples {self.pending()[:8]} have not finished")
        s = self.samples
        return RolloutOutput([x.ran_prompt or x.prompt for x in s], [x.tokens for x in s],
                             [x.log_probs for x in s], [x.finish_reason for x in s],
                             [x.prompt_index for x in s], sampled=[x.kinds for x in s],
                             turns=[x.turns for x in s])

    def versions(self) -> List[List[int]]:
        """Per sample, the weights version of each of its tokens."""
        return [list(x.versions) for x in self.samples]


def generate_in_chunks(generate: Callable[..., RolloutOutput], prompts: Sequence[Sequence[int]],
                       n: int, max_tokens: int, chunk: int, version: Callable[[], int] = lambda: 0,
                       seed: Optional[int] = None, min_tokens: int = 0,
                       between: Callable[[int], None] = lambda chunk_index: None,
                       images: Optional[Sequence[tuple]] = None,
                       episode: Optional[Episode] = None,
                       **sampling_overrides) -> Tuple[RolloutOutput, List[List[int]]]:
    """`generate(prompts, n, **overrides)` (a VLLMEngine's) chunk by chunk until every sample
    finishes; `version()` is read at each chunk and `between(c)` runs after chunk c (where a
    weight sync can go); `episode` runs between a sample's turns. The rollout and each
    sample's per-token versions."""
    rollout = PartialRollout(prompts, n, max_tokens, chunk, min_tokens, images, episode)
    while not rollout.done:
        held = version()
        for call in rollout.next_calls(seed):
            rollout.record(call, generate(call.prompts, call.n, **call.engine_kwargs(),
                                          **sampling_overrides), held)
        rollout.end_chunk()
        if not rollout.done:
            between(rollout.chunks_done)
    return rollout.output(), rollout.versions()


def whole_generation_versions(policy_version: torch.Tensor,
                              response_mask: torch.Tensor) -> torch.Tensor:
    """`token_policy_version` of whole generations: every response token (mask 1) sampled by
    its sample's `policy_version` [B], 0 in the padding; [B, R] like the mask. What a batch
    generated in one piece carries beside chunked ones (dynamic sampling's extra rounds)."""
    versions = policy_version.to(torch.long).unsqueeze(1).expand_as(response_mask)
    return torch.where(response_mask.bool(), versions, torch.zeros_like(versions))


def crossed_update_frac(token_versions: torch.Tensor, mask: torch.Tensor) -> float:
    """The share of samples whose response tokens (mask 1) span more than one weights
    version: [B, R] versions and mask (the Batch's token_policy_version, response_mask)."""
    if len(token_versions) == 0:
        return 0.0
    big = torch.iinfo(token_versions.dtype).max
    valid = mask.bool()
    high = torch.where(valid, token_versions, torch.full_like(token_versions, -big)).amax(1)
    low = torch.where(valid, token_versions, torch.full_like(token_versions, big)).amin(1)
    crossed = valid.any(1) & (high > low)
    return crossed.float().mean().item()
