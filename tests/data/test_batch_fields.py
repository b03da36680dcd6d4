"""The Batch contract as a table (data/batch.FIELDS): every field a step's Batch holds has a
row, written by the phase the row names, and concat pads each 2-D field on its row's side with
its row's value; what only the rollout reads never reaches the Megatron roles."""

import io

import pytest
import torch

from mindrl.config import ClusterResources, load_recipe
from mindrl.data.batch import (BY_NAME, FIELDS, LEFT, NONE, PAD_ID, RIGHT, ROLLOUT_ONLY, ZERO,
                               Batch)
from mindrl.data.prompt_rows import per_prompt_fields
from mindrl.engines.rollout_output import RolloutOutput
from mindrl.rollout.engine_group import RolloutHandle
from mindrl.trainer.advantage_step import advantage_fields

PAD, N = 9, 2
EXTRA_KEYS = ["numbers"]       # a dataset's additional key: a list under its own name


class _AnsweredGroup:
    """A rollout group whose engines have answered: the handle's merge runs for real."""

    phase_timeout_s = None

    def __init__(self, outputs):
        self.outputs = outputs

    def _wait(self, refs, what, timeout, submitted):
        return self.outputs


def _rollout(batch: Batch) -> RolloutOutput:
    prompts = batch.prompts()
    responses = [[1, 2], [3], [4, 5, 6], [7]][:len(prompts) * N]
    return RolloutOutput([p for p in prompts for _ in range(N)], responses,
                         [[-0.5] * len(r) for r in responses], ["stop"] * len(responses),
                         [i for i in range(len(prompts)) for _ in range(N)])


def step_batch(prompt_batch: Batch, version: int = 3) -> Batch:
    """A step's Batch through the phases' own writers: the rollout's merge (responses and
    the policy version), the rewards' scores, the actor's and reference's log-prob passes,
    and the advantage step."""
    handle = RolloutHandle(_AnsweredGroup({0: _rollout(prompt_batch)}), [prompt_batch],
                           {"ref": 0}, N, version, 0.0)
    batch = handle.wait()
    shape = batch["response_mask"].shape
    batch.add(scores=torch.arange(len(batch), dtype=torch.float32))
    batch.add(old_log_probs=-torch.ones(shape), ref_log_probs=-torch.ones(shape))
    rl = load_recipe("grpo_tiny_cpu", ["rl_config.kl_coef=0.1", "rl_config.use_kl_loss=false"],
                     cluster=ClusterResources("cpu", 2)).rl_config
    return batch.add(**advantage_fields(batch, rl))


def text_prompts() -> Batch:
    rows = [{"prompt_ids": [1, 2, 3], "label": "a", "numbers": [1]},
            {"prompt_ids": [4], "label": "b", "numbers": [2]}]
    return Batch.from_prompts([r["prompt_ids"] for r in rows], N, PAD,
                              **per_prompt_fields(rows, EXTRA_KEYS))


def fields_of(batch: Batch) -> set:
    return set(batch.tensors) | set(batch.meta)


def test_every_field_of_a_text_step_has_a_row_with_its_writer():
    batch = step_batch(text_prompts())
    assert fields_of(batch) - set(BY_NAME) == set(EXTRA_KEYS)
    assert batch["policy_version"].tolist() == [3] * len(batch)
    writers = {"prompt loader": {"prompt_ids", "prompt_mask", "group_id", "label"},
               "rollout": {"response_ids", "response_mask", "rollout_log_probs",
                           "finish_reason", "policy_version"},
               "advantage step": {"token_rewards", "advantages"}}
    for writer, names in writers.items():
        assert {n for n in fields_of(batch) if n in BY_NAME and BY_NAME[n].writer == writer
                } == names, writer
    for name in fields_of(batch) & set(BY_NAME):
        row, value = BY_NAME[name], batch[name]
        tensor = isinstance(value, torch.Tensor)
        assert (row.pad != NONE) == (tensor and value.dim() == 2), name
        assert row.shape.startswith("list") != tensor, name


@pytest.fixture(scope="module")
def vl_batch():
    from mindrl.data.vl_prompts import VisionPrompts
    from mindrl.models.processors import build_vl_processor
    from mindrl.trainer.prompt_batches import PromptBatches
    from support.synthetic_images import synthetic_image

    processor = build_vl_processor()
    prompts = PromptBatches(processor.tokenizer, [], 4096, VisionPrompts(processor))
    png = io.BytesIO()
    synthetic_image(56, 56, 0).save(png, format="PNG")
    content = [{"type": "image"}, {"type": "text", "text": "Colour?"}]
    text = processor.apply_chat_template([{"role": "user", "content": content}],
                                         add_generation_prompt=True, tokenize=False)
    rows = [{"prompt_ids": processor.tokenizer(text)["input_ids"], "label": "red",
             "images": [png.getvalue()]}]
    return prompts, prompts.batch(rows, N)


def test_every_field_of_a_vl_prompt_batch_has_a_row_and_the_workers_get_theirs(vl_batch):
    prompts, batch = vl_batch
    assert fields_of(batch) <= set(BY_NAME)
    assert {"rollout_prompt_ids", "images", "pixel_values", "image_grid_thw"} <= fields_of(batch)
    shipped = prompts.for_workers(batch)
    assert fields_of(shipped) == {n for n in fields_of(batch) if BY_NAME[n].megatron}
    assert set(ROLLOUT_ONLY) == {"rollout_prompt_ids", "images"}


def test_the_rollout_reads_only_the_fields_its_rows_say():
    """rollout_prompts reads prompt ids and mask, groups, and a VL batch's rollout ids and
    images: the rows marked `rollout`."""
    assert {f.name for f in FIELDS if f.rollout} == {
        "prompt_ids", "prompt_mask", "group_id", "rollout_prompt_ids", "images"}


@pytest.mark.parametrize("row", [f for f in FIELDS if f.pad != NONE], ids=lambda f: f.name)
def test_concat_pads_each_2d_field_as_its_row_says(row):
    wide = torch.full((1, 3), 5, dtype=torch.long)
    narrow = torch.full((1, 1), 5, dtype=torch.long)
    groups = {"group_id": torch.tensor([0])}
    merged = Batch.concat([Batch.of(PAD, **{row.name: wide}, **groups),
                           Batch.of(PAD, **{row.name: narrow}, **groups)])
    fill = PAD if row.fill == PAD_ID else 0
    expected = [fill, fill, 5] if row.pad == LEFT else [5, fill, fill]
    assert merged[row.name].tolist() == [[5, 5, 5], expected]


def test_table_values_are_known_and_prompts_pad_left_with_the_pad_id():
    assert len(BY_NAME) == len(FIELDS)
    assert {f.pad for f in FIELDS} <= {LEFT, RIGHT, NONE}
    assert {f.fill for f in FIELDS} <= {PAD_ID, ZERO}
    assert {f.name for f in FIELDS if f.pad == LEFT} == {"prompt_ids", "prompt_mask"}
    assert {f.name for f in FIELDS if f.fill == PAD_ID} == {"prompt_ids", "response_ids"}
    assert all(f.rollout or f.megatron for f in FIELDS)
