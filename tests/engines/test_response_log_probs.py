"""Log-probs where they count: response_token_stats computes log p(target) and entropy at the
response positions only, chunk by chunk, equal to the every-position computation (values and
gradients, TP1 and TP2) and inside its fp32 memory bound at a 152k vocabulary; each chunk run
eagerly in place or through vocab_chunks' pure functions (which CUDA compiles into fused
kernels; compiled here too, on the CPU's inductor backend)."""

import math
import weakref

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from mindrl.engines import vocab_parallel
from mindrl.engines.vocab_chunks import ChunkKernels

VOCAB, PADDED = 126, 128   # the padded rows (126, 127) sit on TP rank 1's slice at TP2


@pytest.fixture
def tp1():
    """parallel_state's TP rank / size set by hand: TP1 needs no process group here."""
    from megatron.core import parallel_state as ps

    ps.set_tensor_model_parallel_world_size(1)
    ps.set_tensor_model_parallel_rank(0)
    yield
    ps.set_tensor_model_parallel_world_size(None)
    ps.set_tensor_model_parallel_rank(None)


def _case(mb=3, seq=11, r=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(mb, seq, PADDED, generator=g) * 3
    prompt_lengths = torch.tensor([1, 4, 6])[:mb]
    positions = prompt_lengths[:, None] - 1 + torch.arange(r)[None]
    targets = torch.randint(0, VOCAB, (mb, r), generator=g)
    return logits, positions, targets


def _plain_torch(logits, positions, targets, temperature):
    """Independent reference: log_softmax over the real vocabulary only."""
    lsm = torch.log_softmax(logits[..., :VOCAB].float() / temperature, -1)
    at = lsm[torch.arange(len(positions))[:, None], positions]        # [mb, R, V]
    return at.gather(-1, targets[..., None])[..., 0], -(at.exp() * at).sum(-1)


@pytest.mark.parametrize("kernels", ["eager", "plain"])
@pytest.mark.parametrize("chunk", [1, 4, 512])
def test_values_and_gradients_equal_plain_log_softmax_at_tp1(tp1, chunk, kernels):
    logits, positions, targets = _case()
    weights = torch.randn(2, *positions.shape, generator=torch.Generator().manual_seed(3))
    mine = logits.clone().requires_grad_(True)
    ref = logits.clone().requires_grad_(True)
    logp, ent = vocab_parallel.response_token_stats(
        mine, positions, targets, VOCAB, 0.7, chunk,
        None if kernels == "eager" else ChunkKernels.plain())
    ref_logp, ref_ent = _plain_torch(ref, positions, targets, 0.7)
    assert (logp - ref_logp).abs().max() <= 1e-6
    assert (ent - ref_ent).abs().max() <= 1e-6
    assert ent.min() > 0 and ent.max() <= math.log(VOCAB)
    ((weights[0] * logp).sum() + (weights[1] * ent).sum()).backward()
    ((weights[0] * ref_logp).sum() + (weights[1] * ref_ent).sum()).backward()
    assert (mine.grad - ref.grad).abs().max() <= 1e-6
    assert mine.grad[..., VOCAB:].abs().max() == 0           # padded vocabulary: no gradient
    # positions that are no response token's logit get exactly no gradient
    touched = torch.zeros(logits.shape[:2], dtype=torch.bool)
    touched[torch.arange(3)[:, None], positions] = True
    assert mine.grad[~touched].abs().max() == 0


@pytest.mark.parametrize("kernels", [None, ChunkKernels.plain()])
def test_unused_entropy_needs_no_gradient(tp1, kernels):
    logits, positions, targets = _case()
    mine = logits.clone().requires_grad_(True)
    ref = logits.clone().requires_grad_(True)
    logp, ent = vocab_parallel.response_token_stats(mine, positions, targets, VOCAB, 1.0, 2,
                                                    kernels)
    logp.sum().backward()                                    # entropy left out of the graph
    _plain_torch(ref, positions, targets, 1.0)[0].sum().backward()
    assert (mine.grad - ref.grad).abs().max() <= 1e-6


@pytest.mark.slow
def test_equal_to_every_position_computation_at_tp1_and_tp2():
    """Every way of running a chunk: in place, the pure functions, and those compiled
    (torch.compile, dynamic shapes: chunks of 5 leave a last chunk of 3)."""
    from mindrl.distributed import spawn_local
    from support.response_stats_worker import compare_at_tp

    logits, positions, targets = _case(mb=3, seq=13, r=6, seed=1)
    results = spawn_local(compare_at_tp, 2, logits, positions, targets, VOCAB, 0.7, 5,
                          (1, 2), ("eager", "plain", "compiled"))
    for rank, by_case in enumerate(results):
        assert len(by_case) == 6
        for (tp, kernels), diffs in by_case.items():
            print(f"rank {rank} TP{tp} {kernels}", {k: f"{v:.1e}" for k, v in diffs.items()})
            for key in ("log_probs", "entropy", "grad_logp", "grad_entropy", "grad_both"):
                assert diffs[key] <= 1e-6, (rank, tp, kernels, key, diffs[key])
            assert diffs["grad_both_scale"] > 1e-3   # the gradients compared are not all 0


class Float32Slabs(TorchDispatchMode):
    """Watches every op's float32 outputs of at least `min_numel` elements: the largest one,
    and the most elements of such tensors alive at one time (released when Python frees them)."""

    def __init__(self, min_numel):
        super().__init__()
        self.min_numel, self.largest, self.live, self.peak = min_numel, 0, 0, 0
        self._alive = set()   # id() of the tensors counted and not yet freed

    def _release(self, key, numel):
        self._alive.discard(key)
        self.live -= numel

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if (isinstance(t, torch.Tensor) and t.dtype == torch.float32
                    and t.numel() >= self.min_numel and id(t) not in self._alive):
                self._alive.add(id(t))   # an in-place op returns its input: count it once
                self.largest = max(self.largest, t.numel())
                self.live += t.numel()
                self.peak = max(self.peak, self.live)
                weakref.finalize(t, self._release, id(t), t.numel())
        return out


def test_the_watch_catches_an_every_position_fp32_copy(tp1):
    """The method would catch a regression: today's every-position path makes [mb, S, V]."""
    logits = torch.randn(2, 64, 1024, dtype=torch.bfloat16)
    with Float32Slabs(min_numel=1) as watch:
        vocab_parallel.entropy(logits, 1024)
    assert watch.largest == 2 * 64 * 1024


def test_152k_vocabulary_stays_inside_the_bound(tp1):
    """2 x 1048 positions x 152064 vocabulary (bf16 logits, as a device's model returns them),
    64 response tokens per row, chunks of 48: no fp32 tensor above one chunk's slab
    (48 x 152064), at most two alive at once, forward and backward; a [2, 1048, V] fp32
    copy would be 44x the slab."""
    mb, seq, vocab, r, chunk = 2, 1048, 152064, 64, 48
    # One row of logits seen at every position (a stride-0 view): the input costs 0.3 MB, so
    # whatever is big below was allocated by the log-prob computation.
    row = torch.randn(1, 1, vocab, generator=torch.Generator().manual_seed(0)).bfloat16()
    base = row.clone().requires_grad_(True)
    logits = base.expand(mb, seq, vocab)
    positions = torch.tensor([[100], [900]]) + torch.arange(r)
    targets = torch.randint(0, vocab, (mb, r), generator=torch.Generator().manual_seed(1))
    slab = chunk * vocab
    with Float32Slabs(min_numel=slab // 4) as watch:
        logp, ent = vocab_parallel.response_token_stats(logits, positions, targets, vocab,
                                                        1.0, chunk)
        forward_peak = watch.peak
        (logp.sum() + ent.sum()).backward()
    print(f"largest fp32 tensor {watch.largest * 4 / 2**20:.1f} MiB, peak alive "
          f"{watch.peak * 4 / 2**20:.1f} MiB (forward {forward_peak * 4 / 2**20:.1f}); slab "
          f"{slab * 4 / 2**20:.1f} MiB; [mb, S, V] fp32 {mb * seq * vocab * 4 / 2**20:.0f} MiB")
    assert watch.largest <= slab
    assert watch.peak <= 2 * slab
    # and the numbers are right: every position holds the same row of logits
    ref = torch.log_softmax(row.float()[0, 0], -1)
    assert (logp - ref[targets]).abs().max() <= 1e-5
    assert (ent - (-(ref.exp() * ref).sum())).abs().max() <= 1e-4
    assert base.grad.shape == base.shape and torch.isfinite(base.grad.float()).all()


@pytest.mark.parametrize("width,valid", [(151936, 151643), (4099, 4000)])
def test_two_stage_vocabulary_reductions_equal_one_pass(width, valid):
    """The chunk functions reduce a wide vocabulary in pieces (a split the device can run in
    parallel; an indivisible width stays one piece): the same max, sums and target logit as
    one reduction over each row, padded columns excluded."""
    from mindrl.engines import vocab_chunks

    g = torch.Generator().manual_seed(3)
    logits = (torch.randn(6, width, generator=g) * 4).to(torch.bfloat16)
    local = torch.randint(0, valid, (6,), generator=g)
    here = torch.tensor([True, True, False, True, True, True])
    z = logits.float() / 0.7
    z[:, valid:] = float("-inf")
    expected_max = z.max(-1).values
    got_max = vocab_chunks.chunk_max(logits, 0.7, valid)
    assert torch.equal(got_max, expected_max)
    shifted = z - expected_max[:, None]
    p = shifted.exp()
    expected = torch.stack([p.sum(-1), torch.where(p == 0, 0.0, p * shifted).sum(-1),
                            torch.where(here, shifted.gather(1, local[:, None])[:, 0], 0.0)])
    got = vocab_chunks.chunk_sums(logits, 0.7, valid, expected_max, local, here)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert vocab_chunks._split(z).shape[1] == (64 if width == 151936 else 1)
