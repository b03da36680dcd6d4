"""The vision tower runs once per distinct picture (mindrl/models/distinct_images.py), and that
changes nothing a pass computes: transformers' own Qwen2.5-VL tower gives the same features and
the same parameter gradients for a GRPO-like batch (a prompt's picture in several samples)
whether it sees every copy or only the distinct pictures with their features repeated."""

import torch

from mindrl.models.distinct_images import distinct_images, repeat_features

from support.tiny_vl import MERGE, PIXEL_ROW, tiny_vl_model


def _images(grids, seed):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(t * h * w, PIXEL_ROW, generator=gen) for t, h, w in grids]


def _batch(images, grids, order):
    return (torch.cat([images[i] for i in order]),
            torch.tensor([grids[i] for i in order]))


GRIDS = [(1, 6, 8), (1, 4, 4), (1, 4, 4)]        # the last two: same grid, other pixels
ORDER = [0, 0, 1, 0, 2, 1, 2, 2]                 # three pictures in eight samples


def test_copies_are_found_by_content_and_grid():
    images = _images(GRIDS, seed=0)
    pixels, grids = _batch(images, GRIDS, ORDER)
    distinct, distinct_grids, copy_of = distinct_images(pixels, grids)
    assert copy_of == [0, 0, 1, 0, 2, 1, 2, 2]
    assert distinct_grids.tolist() == [list(g) for g in GRIDS]
    assert torch.equal(distinct, torch.cat(images))
    # Features repeat per image by its merged-token count (t*h*w / MERGE^2 rows each).
    features = torch.arange(sum(t * h * w for t, h, w in GRIDS) // MERGE ** 2)[:, None].float()
    spread = repeat_features(features, distinct_grids, copy_of, MERGE)
    counts = [t * h * w // MERGE ** 2 for t, h, w in GRIDS]
    starts = [0, counts[0], counts[0] + counts[1]]
    expected = torch.cat([features[starts[i]:starts[i] + counts[i]] for i in ORDER])
    assert torch.equal(spread, expected)


def test_all_distinct_pictures_pass_through_unchanged():
    images = _images(GRIDS, seed=1)
    pixels, grids = _batch(images, GRIDS, [0, 1, 2])
    out_pixels, out_grids, copy_of = distinct_images(pixels, grids)
    assert copy_of is None and out_pixels is pixels and out_grids is grids


def test_a_patch_count_that_disagrees_with_the_grids_is_refused():
    images = _images(GRIDS, seed=2)
    pixels, grids = _batch(images, GRIDS, [0, 1])
    try:
        distinct_images(pixels[:-1], grids)
    except ValueError as e:
        assert "patch rows" in str(e)
    else:
        raise AssertionError("a short pixel tensor was accepted")


def test_the_tower_on_distinct_pictures_gives_every_copy_s_features_and_gradients():
    visual = tiny_vl_model().model.visual.float()
    images = _images(GRIDS, seed=3)
    pixels, grids = _batch(images, GRIDS, ORDER)
    tokens = sum(t * h * w for t, h, w in (GRIDS[i] for i in ORDER)) // MERGE ** 2
    weights = torch.randn(tokens, visual.merger.mlp[-1].out_features,
                          generator=torch.Generator().manual_seed(4))

    def features_and_grads(dedup):
        visual.zero_grad()
        if dedup:
            distinct, distinct_grids, copy_of = distinct_images(pixels, grids)
            assert distinct.shape[0] == sum(t * h * w for t, h, w in GRIDS)   # 3 pictures, not 8
            out = repeat_features(visual(distinct, grid_thw=distinct_grids).pooler_output,
                                  distinct_grids, copy_of, MERGE)
        else:
            out = visual(pixels, grid_thw=grids).pooler_output
        (out * weights).sum().backward()
        return out.detach(), {n: p.grad.clone() for n, p in visual.named_parameters()}

    every_copy, every_grads = features_and_grads(dedup=False)
    distinct, distinct_grads = features_and_grads(dedup=True)
    assert (distinct - every_copy).abs().max().item() <= 1e-5
    for name, grad in every_grads.items():
        rel = ((distinct_grads[name] - grad).abs().max() / grad.abs().max().clamp_min(1e-12))
        assert rel.item() <= 1e-5, (name, rel.item())
