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

Given the engine's `SharedSteps`, several such generates run at once (a multi-turn rollout
sends each episode's next turn as soon as its tool has answered, rollout/interleaved.py):
each adds its requests between two steps, and whichever call holds the loop steps the engine
for all of them, each output going to the call that owns the request; a call returns once
its own requests are done, and another caller with requests left takes the loop over. So an
episode waiting for its tool never holds back the others' decoding.
"""

from __future__ import annotations

import threading
import time
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


class SharedSteps:
    """One vLLM engine's step loop shared by the generates running at once on it: the lock
    every add, step and abort holds (vLLM's engine is not thread-safe), which call's answers
    each request id belongs to, and whether a call is stepping now."""

    def __init__(self):
        self.cv = threading.Condition()
        self.owners: Dict[str, Dict[str, StreamedRequest]] = {}   # request id -> its call's
        self.stepping = False
        self.steps = 0           # engine steps run
        self.adding = 0          # calls waiting for the lock to add their requests
        self.adding_lock = threading.Lock()


def generate_stoppable(llm, prompts: Sequence[dict], params: Sequence,
                       should_stop: Callable[[], bool], inflight=None,
                       shared: Optional[SharedSteps] = None) -> List[StreamedRequest]:
    """`llm.generate(prompts, params)` that returns early once `should_stop()` answers true
    after an engine step; `params[i]` are prompt i's SamplingParams (copied: the caller's are
    left as they are). `inflight`: the engine's InflightWeights, or None. `shared`: the
    engine's SharedSteps, for generates that may run at once (else the engine must be idle)."""
    if inflight is None:
        return _generate(llm, prompts, params, should_stop, None, shared)
    with inflight.gate.generating():
        return _generate(llm, prompts, params, should_stop, inflight, shared)


def _generate(llm, prompts, params, should_stop, inflight, shared) -> List[StreamedRequest]:
    from vllm.sampling_params import RequestOutputKind

    engine = llm.llm_engine
    alone = shared is None
    shared = shared or SharedSteps()
    ids: List[str] = []
    answers: Dict[str, StreamedRequest] = {}

    def done() -> bool:
        return all(s.finish_reason is not None for i in ids for s in answers[i].outputs)

    def stopped() -> bool:       # a stop counts once a step has run for these requests
        return shared.steps > added and should_stop()

    try:
        with shared.adding_lock:
            shared.adding += 1
        try:
            shared.cv.acquire()
        finally:
            with shared.adding_lock:
                shared.adding -= 1
        try:
            if alone and engine.has_unfinished_requests():
                raise RuntimeError("the vLLM engine has unfinished requests of another "
                                   "generate")
            added = shared.steps
            for prompt, sampling in zip(prompts, params):
                sampling = sampling.clone()
                sampling.output_kind = RequestOutputKind.DELTA
                request_id = str(next(llm.request_counter))
                answers[request_id] = StreamedRequest(
                    list(map(int, prompt.get("prompt_token_ids", []))),
                    [StreamedSample(i, versions=None if inflight is None else [])
                     for i in range(sampling.n)])
                shared.owners[request_id] = answers
                engine.add_request(request_id, llm._preprocess_cmpl_one(prompt), sampling)
                ids.append(request_id)
        finally:
            shared.cv.release()
        while True:
            with shared.cv:
                shared.cv.wait_for(lambda: done() or stopped() or not shared.stepping)
                if done() or stopped():
                    break
                if not engine.has_unfinished_requests():
                    raise RuntimeError(f"the vLLM engine dropped requests {ids} unfinished")
                shared.stepping = True
            try:
                _step_while(engine, shared, inflight, lambda: not done() and not stopped())
            finally:
                with shared.cv:
                    shared.stepping = False
                    shared.cv.notify_all()
    finally:
        # Stopped (or failed): nothing of this generate stays on the engine.
        with shared.cv:
            unfinished = [i for i in ids if any(s.finish_reason is None
                                                for s in answers[i].outputs)]
            if unfinished and engine.has_unfinished_requests():
                engine.abort_request(unfinished)
            for i in ids:
                shared.owners.pop(i, None)
    return [answers[i] for i in ids]


def _step_while(engine, shared: SharedSteps, inflight, go_on: Callable[[], bool]) -> None:
    """Step the engine for every call's requests until `go_on()` is false after a step; the
    lock is let go between steps, so that other calls add their requests and see their own
    answers."""
    while True:
        with shared.cv:
            if not engine.has_unfinished_requests():
                return
            ended = False
            for output in engine.step():
                owner = shared.owners.get(output.request_id)
                if owner is not None:
                    _record(owner[output.request_id], output, inflight)
                ended = ended or bool(getattr(output, "finished", False))
            shared.steps += 1
            if inflight is not None:
                inflight.gate.between_steps()    # a sync's commit lands here
            shared.cv.notify_all()
            if not go_on():
                return
        if shared.adding or ended:   # a call adding its requests, or one whose requests
            time.sleep(0)            # ended, takes the lock now (the lock is not fair)


def _record(answer: StreamedRequest, output, inflight) -> None:
    """One step's delta of a request into its answer."""
    if output.prompt_token_ids is not None:
        answer.prompt_token_ids = list(map(int, output.prompt_token_ids))
    for streamed in output.outputs:
        sample = answer.outputs[streamed.index]
        sample.token_ids.extend(map(int, streamed.token_ids))
        sample.logprobs.extend(streamed.logprobs or [])
        sample.finish_reason = streamed.finish_reason
        if inflight is not None:
            sample.versions.extend([inflight.commits] * len(streamed.token_ids))
