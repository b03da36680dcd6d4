"""Prompt rows made ready for the loop, once at start-up: token ids, the dataset's additional
keys for the verifiers, and prompts longer than rl_config.max_prompt_length set aside.

One policy for overlong prompts (as verl's filter_overlong_prompts): they are skipped before
training starts, counted (`data/prompts_over_max_length`) and written to a rejects file that
names each row, so nothing is truncated silently and a run never meets one mid-step.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

LABEL_KEYS = ("labels", "label")   # the label travels as `label`, not as an extra keyword


@dataclass
class PromptRows:
    rows: List[dict]        # each with prompt_ids, label and the extra keys
    rejected: List[dict]    # {"row": index in the source, "prompt_tokens": n}


def extra_keys(dataset_additional_keys: Sequence[str]) -> List[str]:
    """The additional keys that reach verifiers as keywords (all but the label)."""
    return [k for k in dataset_additional_keys if k not in LABEL_KEYS]


def prepare_rows(rows: Sequence[dict], source: str, keys: Sequence[str], max_prompt_length: int,
                 tokenize: Callable[[str], List[int]],
                 length: Optional[Callable[[dict], int]] = None,
                 finish: Optional[Callable[[List[int]], List[int]]] = None) -> PromptRows:
    """Rows with token ids; a row missing an extra key fails naming it, the row and the fix;
    rows over `max_prompt_length` tokens are set aside, counted by `length(row)` (default its
    ids; an image prompt's with each image's pad expanded to its tokens). `finish` rewrites
    each row's ids before they are counted (an agent run's tool schemas in the system
    message: trainer/agent.py)."""
    kept, rejected = [], []
    for index, row in enumerate(rows):
        missing = [k for k in keys if k not in row]
        if missing:
            raise ValueError(f"{source}: row {index} has no {missing} (listed in "
                             f"megatron_training.dataset_additional_keys); add the field to "
                             f"every row, or drop it from dataset_additional_keys")
        ids = list(row["prompt_ids"]) if "prompt_ids" in row else tokenize(row["prompt"])
        if finish is not None:
            ids = finish(ids)
        ready = {**row, "prompt_ids": ids}
        tokens = len(ids) if length is None else length(ready)
        if tokens > max_prompt_length:
            rejected.append({"row": index, "prompt_tokens": tokens})
            continue
        kept.append(ready)
    if not kept:
        raise ValueError(f"{source}: all {len(rows)} prompts are longer than "
                         f"rl_config.max_prompt_length={max_prompt_length} tokens; raise it "
                         f"(megatron_training.seq_length must hold it plus max_tokens)")
    return PromptRows(kept, rejected)


def write_rejects(rejected: Sequence[dict], source: str, max_prompt_length: int,
                  path: Path) -> None:
    """One jsonl line per skipped row (source, row, length, limit), written atomically."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        for r in rejected:
            f.write(json.dumps({"source": source, **r, "max_prompt_length": max_prompt_length})
                    + "\n")
    tmp.replace(path)


def per_prompt_fields(rows: Sequence[dict], keys: Sequence[str]) -> Dict[str, list]:
    """label and each extra key as per-prompt lists (Batch.from_prompts' keywords)."""
    return {"label": [r["label"] for r in rows], **{k: [r[k] for r in rows] for k in keys}}


def load_prompt_source(path: str, keys: Sequence[str], max_prompt_length: int,
                       tokenize: Callable[[str], List[int]], rejects_path: Path,
                       log: Callable[[str], None],
                       length: Optional[Callable[[dict], int]] = None,
                       finish: Optional[Callable[[List[int]], List[int]]] = None
                       ) -> Tuple[List[dict], int]:
    """A prompt source's rows made ready (`prepare_rows`) and how many were skipped; skipped
    rows are written to `rejects_path` and said in one line."""
    from mindrl.data.indexed import load_prompt_rows

    ready = prepare_rows(load_prompt_rows(path), str(path), keys, max_prompt_length, tokenize,
                         length, finish)
    if ready.rejected:
        rejects_path.parent.mkdir(parents=True, exist_ok=True)
        write_rejects(ready.rejected, str(path), max_prompt_length, rejects_path)
        log(f"{path}: {len(ready.rejected)} of {len(ready.rows) + len(ready.rejected)} prompts "
            f"are longer than rl_config.max_prompt_length={max_prompt_length} tokens and are "
            f"skipped (rows listed in {rejects_path})")
    return ready.rows, len(ready.rejected)
