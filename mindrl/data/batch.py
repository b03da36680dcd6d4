"""The step's Batch: the data contract (docs/design.md#the-batch-contract) as one
object.

Rows are samples (B = prompts x n); the n samples of one prompt are consecutive rows sharing
a `group_id`. `tensors` hold per-sample tensors with B leading (2-D fields padded: prompt
fields on the left, everything else on the right); `meta` holds per-sample Python values
(labels, a dataset's additional keys, finish reasons). Phases add fields and never rewrite
another phase's (`add` refuses), and the batch splits by prompt group and concatenates back,
re-padding to the widest part, so a rollout engine group can deal it out and merge it.
FIELDS holds the contract: each field's shape, pad side and value, writer and readers.

Later fields (packed sequences with `cu_seqlens`, images with `pixel_values` and
`image_grid_thw`) are more entries of `tensors` / `meta`: the operations here are by row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Union

import torch

LEFT, RIGHT, NONE = "left", "right", "none"     # pad side of a field (NONE: not 2-D)
PAD_ID, ZERO = "pad id", "0"                    # what a field's padding holds


@dataclass(frozen=True)
class Field:
    """One row of the Batch contract."""

    name: str
    shape: str         # B = samples, P / R = padded prompt / response length; list = per sample
    pad: str           # LEFT / RIGHT (re-padded on that side by concat) or NONE
    fill: str          # PAD_ID or ZERO
    writer: str        # the phase that adds it; no other phase rewrites it
    rollout: bool      # the rollout engines read it (rollout/merge.rollout_prompts)
    megatron: bool     # the Megatron roles receive it (the trainer's PromptBatches.for_workers)


FIELDS = (
    Field("prompt_ids", "[B, P] int", LEFT, PAD_ID, "prompt loader", True, True),
    Field("prompt_mask", "[B, P] int", LEFT, ZERO, "prompt loader", True, True),
    Field("group_id", "[B] int: the prompt's, shared by its n samples", NONE, ZERO,
          "prompt loader", True, True),
    Field("label", "list: the dataset's label (verifiers' keyword)", NONE, ZERO,
          "prompt loader", False, True),
    # A VL prompt's, shared by reference by its n samples (trainer/prompt_batches.py).
    Field("rollout_prompt_ids", "list: ids with one <|image_pad|> per image", NONE, ZERO,
          "prompt loader", True, False),
    Field("images", "list: PNG bytes per image", NONE, ZERO, "prompt loader", True, False),
    Field("pixel_values", "list: the processor's tensor", NONE, ZERO, "prompt loader",
          False, True),
    Field("image_grid_thw", "list: the processor's tensor", NONE, ZERO, "prompt loader",
          False, True),
    Field("response_ids", "[B, R] int", RIGHT, PAD_ID, "rollout", False, True),
    # Two masks, two questions. response_mask: is the token real (attended; lengths, packing,
    # positions, the reward model's last token). loss_mask: is it trained (the objective, its
    # token-mean denominators, importance weights, the drift metric, the advantages); a subset:
    # an inserted token (a tool's answer) is real and never trained.
    Field("response_mask", "[B, R] int: 1 on the real tokens (sampled and inserted), up to "
          "and including EOS", RIGHT, ZERO, "rollout", False, True),
    Field("loss_mask", "[B, R] int: 1 on the trained tokens (the engine's sampled ones), a "
          "subset of response_mask", RIGHT, ZERO, "rollout (episodes)", False, True),
    Field("token_turn", "[B, R] int: the episode turn of each response token (0: the first, "
          "and every token of a single turn)", RIGHT, ZERO, "rollout (episodes)", False, True),
    Field("rollout_log_probs", "[B, R] float: vLLM's sampled-token log-probs", RIGHT, ZERO,
          "rollout", False, True),
    Field("finish_reason", "list: vLLM's (stop, length)", NONE, ZERO, "rollout", False, True),
    # Routing replay (models/route_replay.py): per sample, its valid prompt tokens then its
    # response, each MoE layer's top-k expert ids; -1 where a token has none (its last).
    Field("rollout_routes", "[B, P+R, L, K] int: the engine's expert ids per token", RIGHT,
          ZERO, "rollout", False, True),
    Field("policy_version", "[B] int: the actor's weights version that generated it", NONE,
          ZERO, "rollout", False, True),
    # Partial rollouts (rollout/partial.py) and an in-flight sync (engines/vllm_inflight.py):
    # a sample may span a weight sync; policy_version stays the version its batch was
    # admitted on (what max_staleness bounds).
    Field("token_policy_version", "[B, R] int: the weights version that sampled each token",
          RIGHT, ZERO, "rollout", False, True),
    # An environment's episode (rollout/environment.py): the sum of its steps' rewards.
    Field("env_reward", "[B] float: the environment's reward", NONE, ZERO,
          "rollout (episodes)", False, True),
    Field("scores", "[B] float", NONE, ZERO, "rewards", False, True),
    Field("old_log_probs", "[B, R] float", RIGHT, ZERO, "actor (old-log-prob pass)", False,
          True),
    Field("old_routes", "[B, P+R, L, K] int: the routers' expert ids in that pass", RIGHT,
          ZERO, "actor (old-log-prob pass)", False, True),
    Field("ref_log_probs", "[B, R] float", RIGHT, ZERO, "reference", False, True),
    # On-policy distillation: the teacher's log-prob of each sampled token (its own model).
    Field("teacher_log_probs", "[B, R] float", RIGHT, ZERO, "teacher", False, True),
    Field("token_rewards", "[B, R] float", RIGHT, ZERO, "advantage step", False, True),
    Field("advantages", "[B, R] float", RIGHT, ZERO, "advantage step", False, True),
)
# Not rows: a dataset's additional keys (megatron_training.dataset_additional_keys), lists
# the prompt loader adds under the dataset's own names, read by the verifiers.
BY_NAME = {f.name: f for f in FIELDS}
ROLLOUT_ONLY = tuple(f.name for f in FIELDS if f.rollout and not f.megatron)

Rows = Union[Sequence[int], torch.Tensor]


def left_pad(seqs: Sequence[Sequence[int]], pad_id: int, length: Optional[int] = None):
    """[B, P] ids and mask, padding on the left (prompts)."""
    length = max(map(len, seqs), default=0) if length is None else length
    ids = torch.full((len(seqs), length), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), length), dtype=torch.long)
    for i, s in enumerate(seqs):
        if len(s) > length:
            raise ValueError(f"sequence {i} has {len(s)} tokens, more than the length {length}")
        if s:
            ids[i, length - len(s):] = torch.as_tensor(s)
            mask[i, length - len(s):] = 1
    return ids, mask


def right_pad(seqs: Sequence[Sequence], pad, length: Optional[int] = None,
              dtype=torch.long):
    """[B, R] values and mask, padding on the right (responses)."""
    length = max(map(len, seqs), default=0) if length is None else length
    out = torch.full((len(seqs), length), pad, dtype=dtype)
    mask = torch.zeros((len(seqs), length), dtype=torch.long)
    for i, s in enumerate(seqs):
        if len(s) > length:
            raise ValueError(f"sequence {i} has {len(s)} tokens, more than the length {length}")
        if len(s):
            out[i, :len(s)] = torch.as_tensor(s, dtype=dtype)
            mask[i, :len(s)] = 1
    return out, mask


def _pad_to(name: str, value: torch.Tensor, width: int, pad_id: int) -> torch.Tensor:
    """A 2-D field padded to `width` columns on its side."""
    extra = width - value.shape[1]
    if extra == 0:
        return value
    row = BY_NAME.get(name)         # a field outside the table pads like a response's
    fill = pad_id if row is not None and row.fill == PAD_ID else 0
    pad = torch.full((value.shape[0], extra, *value.shape[2:]), fill, dtype=value.dtype)
    parts = (pad, value) if row is not None and row.pad == LEFT else (value, pad)
    return torch.cat(parts, dim=1)


@dataclass
class Batch:
    tensors: Dict[str, torch.Tensor]
    meta: Dict[str, list] = field(default_factory=dict)
    pad_id: int = 0

    # ------------------------------------------------------------------ building

    @classmethod
    def from_prompts(cls, prompt_ids: Sequence[Sequence[int]], n: int, pad_id: int,
                     **per_prompt: Sequence) -> "Batch":
        """Each prompt repeated n times (left-padded), group_id = the prompt's position;
        `per_prompt` lists (labels, extra keys) are repeated alongside."""
        repeated = [list(p) for p in prompt_ids for _ in range(n)]
        ids, mask = left_pad(repeated, pad_id)
        group = torch.arange(len(prompt_ids)).repeat_interleave(n)
        meta = {}
        for key, values in per_prompt.items():
            if len(values) != len(prompt_ids):
                raise ValueError(f"{key}: {len(values)} values for {len(prompt_ids)} prompts")
            meta[key] = [v for v in values for _ in range(n)]
        return cls({"prompt_ids": ids, "prompt_mask": mask, "group_id": group}, meta, pad_id)

    def add(self, **fields) -> "Batch":
        """New fields, one value per sample (tensors with B leading, or lists); a field that
        exists is refused: each phase owns the fields it writes."""
        for key, value in fields.items():
            if key in self:
                raise KeyError(f"batch field {key!r} is already set; a phase may not rewrite "
                               f"another phase's field")
            if len(value) != len(self):
                raise ValueError(f"batch field {key!r} has {len(value)} rows, the batch "
                                 f"{len(self)}")
            (self.tensors if isinstance(value, torch.Tensor) else self.meta)[key] = (
                value if isinstance(value, torch.Tensor) else list(value))
        return self

    # ------------------------------------------------------------------ reading

    @classmethod
    def of(cls, pad_id: int = 0, **fields) -> "Batch":
        """A Batch from fields given whole (tensors with B leading, per-sample lists), e.g. a
        test's or a bench's hand-made batch; no field is required."""
        return cls({k: v for k, v in fields.items() if isinstance(v, torch.Tensor)},
                   {k: list(v) for k, v in fields.items() if not isinstance(v, torch.Tensor)},
                   pad_id)

    def __len__(self) -> int:
        for value in self.tensors.values():
            return int(value.shape[0])
        return len(next(iter(self.meta.values()), []))

    def __contains__(self, key: str) -> bool:
        return key in self.tensors or key in self.meta

    def __getitem__(self, key: str):
        if key in self.tensors:
            return self.tensors[key]
        if key in self.meta:
            return self.meta[key]
        raise KeyError(f"batch has no field {key!r} (it has {sorted(self.tensors)} and "
                       f"{sorted(self.meta)})")

    def get(self, key: str, default=None):
        return self[key] if key in self else default

    @property
    def group_ids(self) -> List[int]:
        """The prompt groups in row order, each once."""
        return list(dict.fromkeys(self.tensors["group_id"].tolist()))

    def prompts(self) -> List[List[int]]:
        """One unpadded prompt per group (its first row), in group order."""
        ids, mask, groups = (self.tensors["prompt_ids"], self.tensors["prompt_mask"],
                             self.tensors["group_id"].tolist())
        first = {}
        for row, g in enumerate(groups):
            first.setdefault(g, row)
        return [ids[r][mask[r].bool()].tolist() for r in first.values()]

    def samples_per_group(self) -> int:
        """n: rows per prompt group (the same for every group of a batch built here)."""
        groups = self.group_ids
        return len(self) // len(groups) if groups else 0

    def response_lists(self) -> List[List[int]]:
        """Each sample's whole response, inserted tokens included (what verifiers read: a
        multi-turn answer with what the tools said between its turns)."""
        ids, mask = self.tensors["response_ids"], self.tensors["response_mask"]
        return [ids[r][mask[r].bool()].tolist() for r in range(len(self))]

    def trained_mask(self) -> torch.Tensor:
        """[B, R] the tokens the objective trains: `loss_mask`, which every rollout writes;
        a batch without one (made by hand) trains every real token."""
        return self.tensors.get("loss_mask", self.tensors["response_mask"])

    # ------------------------------------------------------------------ by row

    def without(self, *names: str) -> "Batch":
        """The same rows without `names` (absent names are fine); the fields are shared."""
        return Batch({k: v for k, v in self.tensors.items() if k not in names},
                     {k: v for k, v in self.meta.items() if k not in names}, self.pad_id)

    def select(self, rows: Rows) -> "Batch":
        index = torch.as_tensor(rows, dtype=torch.long)
        picked = index.tolist()
        return Batch({k: v[index] for k, v in self.tensors.items()},
                     {k: [v[i] for i in picked] for k, v in self.meta.items()}, self.pad_id)

    def select_groups(self, groups: Sequence[int]) -> "Batch":
        """The rows of `groups`, group by group in the order given."""
        by_group: Dict[int, List[int]] = {}
        for row, g in enumerate(self.tensors["group_id"].tolist()):
            by_group.setdefault(g, []).append(row)
        return self.select([r for g in groups for r in by_group[g]])

    def split_groups(self, parts: int) -> List["Batch"]:
        """`parts` batches of consecutive prompt groups, group counts differing by at most one
        (the first parts take the extra); a part with nothing to do is empty."""
        groups = self.group_ids
        base, extra = divmod(len(groups), parts)
        out, start = [], 0
        for p in range(parts):
            stop = start + base + (1 if p < extra else 0)
            out.append(self.select_groups(groups[start:stop]))
            start = stop
        return out

    @staticmethod
    def concat(batches: Sequence["Batch"], renumber_groups: bool = False) -> "Batch":
        """Rows of every batch in order, 2-D fields re-padded to the widest. With
        `renumber_groups`, group ids become 0, 1, ... in order of appearance (batches drawn
        from different prompt batches reuse ids)."""
        batches = [b for b in batches if len(b)]
        if not batches:
            raise ValueError("concat of no rows")
        keys = set(batches[0].tensors)
        for b in batches[1:]:
            if set(b.tensors) != keys or set(b.meta) != set(batches[0].meta):
                raise ValueError(f"batches with different fields: {sorted(keys)} vs "
                                 f"{sorted(b.tensors)}")
        pad_id = batches[0].pad_id
        tensors = {}
        for key in batches[0].tensors:
            values = [b.tensors[key] for b in batches]
            if values[0].dim() >= 2:
                width = max(v.shape[1] for v in values)
                values = [_pad_to(key, v, width, pad_id) for v in values]
            tensors[key] = torch.cat(values)
        meta = {k: [x for b in batches for x in b.meta[k]] for k in batches[0].meta}
        out = Batch(tensors, meta, pad_id)
        if renumber_groups:
            out.tensors["group_id"] = _renumbered(
                [(i, g) for i, b in enumerate(batches) for g in b.tensors["group_id"].tolist()])
        return out


def _renumbered(keys: Sequence[tuple]) -> torch.Tensor:
    """0, 1, ... per distinct key in order of appearance."""
    ids: Dict[tuple, int] = {}
    return torch.tensor([ids.setdefault(k, len(ids)) for k in keys], dtype=torch.long)
