"""What a resume restores: the optimizer and RNG states as no_load_optim / no_load_rng say,
refused up front (naming the keys) when the checkpoint was saved without them."""

import pytest
import torch

from mindrl.trainer.resume import ResumeParts, held_parts, resume_parts


def _checkpoint(path, keys):
    import torch.distributed.checkpoint as dcp

    dcp.save({k: torch.zeros(2) for k in keys}, checkpoint_id=str(path), no_dist=True)
    return path


def test_held_parts_read_from_the_checkpoint_metadata(tmp_path):
    full = _checkpoint(tmp_path / "full", ["decoder.w", "optimizer.distributed.x.exp_avg",
                                           "rng_state/shard_0.0_1.1"])
    bare = _checkpoint(tmp_path / "bare", ["decoder.w", "embedding.word_embeddings.weight"])
    assert held_parts(full) == {"optimizer", "rng"}
    assert held_parts(bare) == set()
    # at EP > 1 Megatron chains a dense and an expert optimizer: their keys say so
    chained = _checkpoint(tmp_path / "chained", [
        "decoder.w", "chained_0.optimizer.state.exp_avg.decoder.w",
        "chained_1.optimizer.state.exp_avg.decoder.layers.0.mlp.experts.w"])
    assert held_parts(chained) == {"optimizer"}
    assert held_parts(_checkpoint(tmp_path / "named", ["decoder.optimizer.w"])) == set()


def test_each_key_decides_its_part():
    both = frozenset({"optimizer", "rng"})
    assert resume_parts(both, False, False, "c") == ResumeParts(True, True)
    assert resume_parts(both, True, False, "c") == ResumeParts(False, True)
    assert resume_parts(both, False, True, "c") == ResumeParts(True, False)
    assert resume_parts(frozenset(), True, True, "c") == ResumeParts(False, False)
    assert ResumeParts(False, True).describe() == (
        "model, data position, RNG state; fresh optimizer state "
        "(actor_config.no_load_optim: true)")


@pytest.mark.parametrize("held, key", [({"rng"}, "optim"), ({"optimizer"}, "rng")])
def test_a_part_saved_without_is_refused_naming_the_keys(held, key):
    with pytest.raises(ValueError, match=rf"run/iter_0000002 was saved without its .* state "
                                         rf"\(actor_config.no_save_{key}: true\); set "
                                         rf"actor_config.no_load_{key}: true"):
        resume_parts(frozenset(held), False, False, "run/iter_0000002")


def test_a_layout_change_names_its_own_reason():
    parts = ResumeParts(True, False, rng_reason="the parallel layout changed")
    assert parts.describe() == ("model, data position, optimizer state; fresh RNG state "
                                "(the parallel layout changed)")
