"""Expected fingerprints from the ranks' shards (weight_sync/fingerprint.py) equal the
fingerprints of the gathered HF tensors, for every tensor rule at TP1 and TP2 (fused q/k/v by
query group, fused gate/up, column-split projections, padded vocabulary), and tell a swapped
shard apart."""

import dataclasses

import pytest
import torch

from mindrl.ckpt import mapping
from mindrl.ckpt.fingerprint import compare_fingerprints, fingerprint_tensors
from mindrl.config.model_spec import load_model_spec
from mindrl.weight_sync.fingerprint import probe_rows, unit_digests


@pytest.fixture(scope="module")
def spec():
    return dataclasses.replace(load_model_spec("tiny-qwen2"), make_vocab_size_divisible_by=3)


def _shards(spec, rule, tp, seed):
    g = torch.Generator().manual_seed(seed)
    parts = [torch.randn(s, generator=g) for s in mapping.expected_hf_shapes(rule, spec)]
    rows = -(-spec.vocab_size // (spec.make_vocab_size_divisible_by * tp)) \
        * spec.make_vocab_size_divisible_by * tp
    full = mapping.hf_to_mcore(rule, parts, spec, rows)
    return [mapping.shard(rule, full, r, tp) for r in range(tp)]


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_shard_digests_equal_the_gathered_tensors_fingerprints(spec, tp, dtype):
    rules = [(rule, layer) for rule, layer in mapping.iter_rules(spec) if layer in (None, 0)]
    assert {rule.tp_dim for rule, _ in rules} == {None, 0, 1}
    for i, (rule, layer) in enumerate(rules):
        shards = _shards(spec, rule, tp, seed=i)
        gathered = mapping.mcore_to_hf(rule, mapping.gather(rule, shards), spec, layer)
        ref = fingerprint_tensors(gathered.items(), dtype)
        ranks = 1 if rule.tp_dim is None else tp
        got = unit_digests(rule, spec, layer,
                           [probe_rows(rule, shards[r], r, tp, dtype) for r in range(ranks)])
        assert set(got) == set(ref), rule.mcore
        # Only the float32 summation order of W p differs from the gathered tensor's.
        for name in ref:
            scale = float(ref[name][1]) ** 0.5
            assert (got[name] - ref[name]).abs().max() <= 1e-6 * scale * max(1.0, scale), \
                (name, tp, got[name], ref[name])
        assert compare_fingerprints(got, ref, dtype) == []


def test_a_shard_in_the_wrong_place_changes_the_digest(spec):
    """Two TP ranks' shards exchanged (same bytes, wrong rows or columns): every split kind."""
    for rule, layer in mapping.iter_rules(spec):
        if layer != 0 or rule.tp_dim is None:
            continue
        shards = _shards(spec, rule, 2, seed=3)
        right = unit_digests(rule, spec, layer, [probe_rows(rule, s, r, 2, None)
                                                 for r, s in enumerate(shards)])
        wrong = unit_digests(rule, spec, layer, [probe_rows(rule, s, r, 2, None)
                                                 for r, s in enumerate(shards[::-1])])
        assert compare_fingerprints(wrong, right, torch.float32), rule.mcore
