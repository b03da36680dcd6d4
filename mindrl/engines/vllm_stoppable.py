"""A generate that a weight sync can stop mid-request (issue 40 item 3): vLLM's offline loop
(`LLM.generate` adds the requests, then steps the engine until none is unfinished), with a
question asked after every engine step. Once `should_stop()` is true the unfinished requests
are aborted and answer what they generated so far, with finish_reason None: the partial
rollout (rollout/partial.py) continues them from their prefix on the new weights.

The requests stream their tokens (RequestOutputKind.DELTA, where LLM.generate asks only for the
final output), so a stopped request's tokens and sampled log-probs are known without reading
the engine's internals; the answers are RequestOutput-like, in the prompts' order, each with
all n samples in index order. Without a stop the tokens, log-probs and finish reasons are
LLM.generate's (tests/engines/test_partial_rollout.py).

Given an engine's `InflightWeights` (rl_config.inflight_sync), the loop is also where a weight
sync lands: the gate's queued work (the staged version's commit) runs after each engine
step, and every token records the count of versions the engine had taken in when the step
that sampled it ran (`StreamedSample.versions`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence


@dataclass
class StreamedSample:
    """One sample's tokens, their log-prob dicts (vLLM's per-token {token: Logprob}) and its
    finish reason (None: still running, or stopped)."""

    index: int
    token_ids: List[int] = field(default_factory=list)
    logprobs: List[dict] = field(default_factory=list)
    finish_reason: Optional[str] = None
    versions: Optional[List[int]] = None     # per token, with inflight weights


@dataclass
class StreamedRequest:
    """One prompt's answer: vLLM's prompt ids (image pads expanded) and its n samples."""

    prompt_token_ids: List[int]
    outputs: List[StreamedSample]


def generate_stoppable(llm, prompts: Sequence[dict], params: Sequence,
                       should_stop: Callable[[], bool], inflight=None) -> List[StreamedRequest]:
    """`llm.generate(prompts, params)` that returns early once `should_stop()` answers true
    after an engine step; `params[i]` are prompt i's SamplingParams (copied: the caller's are
    left as they are). `inflight`: the engine's InflightWeights, or None."""
    if inflight is None:
        return _generate(llm, prompts, params, should_stop, None)
    with inflight.gate.generating():
        return _generate(llm, prompts, params, should_stop, inflight)


def _generate(llm, prompts, params, should_stop, inflight) -> List[StreamedRequest]:
    from vllm.sampling_params import RequestOutputKind

    engine = llm.llm_engine
    if engine.has_unfinished_requests():
        raise RuntimeError("the vLLM engine has unfinished requests of another generate")
    ids: List[str] = []
    answers: Dict[str, StreamedRequest] = {}
    try:
        for prompt, sampling in zip(prompts, params):
            sampling = sampling.clone()
            sampling.output_kind = RequestOutputKind.DELTA
            request_id = str(next(llm.request_counter))
            engine.add_request(request_id, llm._preprocess_cmpl_one(prompt), sampling)
            ids.append(request_id)
            answers[request_id] = StreamedRequest(
                list(map(int, prompt.get("prompt_token_ids", []))),
                [StreamedSample(i, versions=None if inflight is None else [])
                 for i in range(sampling.n)])
        while engine.has_unfinished_requests():
            for output in engine.step():
                answer = answers[output.request_id]
                if output.prompt_token_ids is not None:
                    answer.prompt_token_ids = list(map(int, output.prompt_token_ids))
                for streamed in output.outputs:
                    sample = answer.outputs[streamed.index]
                    sample.token_ids.extend(map(int, streamed.token_ids))
                    sample.logprobs.extend(streamed.logprobs or [])
                    sample.finish_reason = streamed.finish_reason
                    if inflight is not None:
                        sample.versions.extend([inflight.commits] * len(streamed.token_ids))
            if inflight is not None:
                inflight.gate.between_steps()    # a sync's commit lands here
            if engine.has_unfinished_requests() and should_stop():
                break
    finally:
        # Stopped (or failed): nothing of this generate stays on the engine.
        unfinished = [i for i in ids if any(s.finish_reason is None
                                            for s in answers[i].outputs)]
        if unfinished and engine.has_unfinished_requests():
            engine.abort_request(unfinished)
    return [answers[i] for i in ids]
