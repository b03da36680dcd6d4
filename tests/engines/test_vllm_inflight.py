"""A weight sync while the engine decodes (rl_config.inflight_sync, engines/vllm_inflight.py):
one in-process vLLM generates 6 samples of 40 tokens in a thread while this thread hands it
new weights after its 5th engine step. The new version lands between two decode steps, for
every running sample at the same token; each token says which version sampled it; the
sampled log-probs after the switch are the new weights' (exactly where the new weights make
every logit 0; against a teacher-forced score with recompute_kv, and not so with keep_kv,
whose requests keep the KV their earlier tokens computed on the old weights); a verified
sync's fingerprints match the new weights."""

import math
import threading
import time

import pytest
import torch
from safetensors.torch import load_file
from support.char_engine import TOKENS, perturbed_layers, start_char_engine

from mindrl.ckpt.fingerprint import fingerprint_tensors

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    engine, model, prompts = start_char_engine(tmp_path_factory.mktemp("model"), TOKENS, 1.0,
                                               inflight_sync="recompute_kv", gate_timeout_s=60)
    weights = load_file(str(model / "model.safetensors"))
    yield engine, prompts, weights
    engine.close()


def _generate_with_a_sync_after(engine, prompts, new_weights, steps: int = 5):
    """Generate in a thread; after `steps` engine steps hand over `new_weights` and commit.
    The rollout and the gate's step count when the commit returned."""
    gate, box = engine.inflight.gate, {}
    start = gate.steps
    thread = threading.Thread(target=lambda: box.setdefault("out", engine.generate(
        prompts, n=2, seed=3, ignore_eos=True)))
    thread.start()
    while gate.steps - start < steps:
        assert thread.is_alive(), "the generate ended before the sync"
        time.sleep(0.002)
    engine.load_weights(new_weights.items())    # staged: the engine keeps decoding
    engine.weights_written()                    # lands between two decode steps
    at = gate.steps - start
    thread.join(120)
    return box["out"], at


def _switch(out):
    """The token index where each sample's version changes (all samples: one index)."""
    firsts = set()
    for commits in out.token_commits:
        assert commits == sorted(commits) and commits[0] < commits[-1], commits
        firsts.add(commits.index(commits[-1]))
    assert len(firsts) == 1, firsts
    return firsts.pop()


def _restore(engine, weights):
    engine.load_weights(weights.items())
    engine.weights_written()


def test_the_new_version_lands_between_two_decode_steps_for_every_sample(setup):
    """Final norm zeroed: every logit is 0 after the switch, so each token sampled on the new
    weights has log-prob -log(V) exactly, and each one before does not."""
    engine, prompts, weights = setup
    flat = {**weights, "model.norm.weight": torch.zeros_like(weights["model.norm.weight"])}
    before = engine.inflight.commits
    out, at = _generate_with_a_sync_after(engine, prompts, flat)
    assert engine.inflight.commits == before + 1
    assert [len(ids) for ids in out.response_token_ids] == [TOKENS] * 6
    cut = _switch(out)
    assert 5 <= cut <= at < TOKENS               # after the 5th step, before the last token
    # -log(V) for V the logits' width (vLLM pads the vocabulary): one value, V an integer
    uniform = out.log_probs[0][-1]
    assert abs(math.exp(-uniform) - round(math.exp(-uniform))) < 1e-3
    for logps, commits in zip(out.log_probs, out.token_commits):
        new = [lp for lp, c in zip(logps, commits) if c == commits[-1]]
        old = [lp for lp, c in zip(logps, commits) if c != commits[-1]]
        assert max(abs(lp - uniform) for lp in new) < 1e-5
        assert min(abs(lp - uniform) for lp in old) > 1e-3
    # The verified sync's check: vLLM holds exactly the new weights.
    engine.start_fingerprint()
    engine.check_fingerprint(fingerprint_tensors(flat.items(), engine.dtype))
    _restore(engine, weights)
    engine.check_fingerprint(fingerprint_tensors(weights.items(), engine.dtype))


@pytest.mark.parametrize("mode", ["recompute_kv", "keep_kv"])
def test_after_the_switch_recompute_kv_samples_the_new_policy_and_keep_kv_its_old_kv(setup,
                                                                                     mode):
    """New layer weights change every token's KV. recompute_kv: the log-probs sampled after
    the switch equal the new weights' teacher-forced score of the same tokens; keep_kv: they
    do not (the earlier tokens' KV is the old weights'), while the tokens before the switch
    are sampled as with recompute_kv."""
    engine, prompts, weights = setup
    new = perturbed_layers(weights)
    engine.inflight.mode = mode
    try:
        out, _ = _generate_with_a_sync_after(engine, prompts, new)
    finally:
        engine.inflight.mode = "recompute_kv"
    cut = _switch(out)
    scored = engine.score(out.prompt_token_ids, out.response_token_ids)   # new weights
    gaps = [abs(a - b) for logps, ref in zip(out.log_probs, scored)
            for a, b in zip(logps[cut:], ref[cut:])]
    if mode == "recompute_kv":
        assert max(gaps) < 1e-4
    else:
        assert max(gaps) > 1e-2
    _restore(engine, weights)

