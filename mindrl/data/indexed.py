"""Megatron indexed datasets of prompts: the writer side's file names and the trainer's reader.

A preprocessed dataset is a prefix: ``<prefix>_input_ids.{bin,idx}`` (templated prompt
token ids), one ``<prefix>_<key>.{bin,idx}`` per additional key (e.g. ``labels``), and
``<prefix>_manifest.json``, which records the tokenizer needed to decode them. Rows read back
carry the same fields as a jsonl prompt file, so the trainer takes either.

An image recipe adds ``<prefix>_images.{bin,idx}`` (manifest key "images"): uint8 sequences,
one document per row and one sequence per image, each the resized image's PNG bytes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional, Union

MANIFEST_SUFFIX = "_manifest.json"
REJECTS_SUFFIX = "_rejects.jsonl"
INPUT_KEY = "input_ids"
IMAGES_KEY = "images"


def key_prefix(prefix: Union[str, Path], key: str) -> str:
    return f"{prefix}_{key}"


def manifest_path(prefix: Union[str, Path]) -> Path:
    return Path(f"{prefix}{MANIFEST_SUFFIX}")


def read_manifest(prefix: Union[str, Path]) -> Dict:
    path = manifest_path(prefix)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no manifest; {prefix} is not a preprocessed dataset "
                                f"prefix (run cli/preprocess_data.py)")
    with open(path) as f:
        return json.load(f)


def open_indexed(prefix: Union[str, Path], key: str):
    """Megatron's IndexedDataset for one key (CPU-safe: it only mmaps files)."""
    # Pure file I/O: no CUDA, so no CPU compat layer (and none of its import cost).
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    return IndexedDataset(key_prefix(prefix, key), mmap=True)


def read_indexed_prompts(prefix: Union[str, Path]) -> List[dict]:
    """Rows {"prompt_ids", "prompt", "label", <additional keys>} of a preprocessed dataset.

    "label" is decoded from the ``labels`` key (preprocessing only keeps values that
    round-trip exactly), every other additional key under its own name; "prompt" is the
    decoded template text, for logs. A prefix written by an image recipe also has
    "images": the PNG bytes of the row's resized images, in pad order ([] for none).
    """
    from mindrl.models.tokenizers import load_tokenizer

    manifest = read_manifest(prefix)
    if "labels" not in manifest["keys"]:
        raise ValueError(f"{manifest_path(prefix)}: dataset has no 'labels' key; preprocess with "
                         f"dataset_additional_keys: [labels]")
    tokenizer = load_tokenizer(manifest["tokenizer"])
    keys = [k for k in manifest["keys"] if k != INPUT_KEY]
    columns = {k: open_indexed(prefix, k) for k in [INPUT_KEY] + keys}
    for key, column in columns.items():
        if len(column) != len(columns[INPUT_KEY]):
            raise ValueError(f"{prefix}: {len(columns[INPUT_KEY])} prompts but {len(column)} "
                             f"{key}; re-run preprocessing")

    images = read_row_images(prefix, manifest, len(columns[INPUT_KEY]))

    def text(key: str, i: int) -> str:
        return tokenizer.decode([int(t) for t in columns[key][i]], skip_special_tokens=False)

    rows = []
    for i in range(len(columns[INPUT_KEY])):
        ids = [int(t) for t in columns[INPUT_KEY][i]]
        row = {"prompt_ids": ids, "prompt": tokenizer.decode(ids, skip_special_tokens=False),
               "label": text("labels", i)}
        row.update({k: _value(text(k, i)) for k in keys if k != "labels"})
        if images is not None:
            row["images"] = images[i]
        rows.append(row)
    if not rows:
        raise ValueError(f"{prefix}: no prompts (see {prefix}{REJECTS_SUFFIX})")
    return rows


def read_row_images(prefix: Union[str, Path], manifest: Dict, rows: int
                    ) -> Optional[List[List[bytes]]]:
    """Each row's image bytes from the images sidecar, or None for a text-only prefix."""
    entry = manifest.get(IMAGES_KEY)
    if not entry:
        return None
    column = open_indexed(prefix, entry.get("key", IMAGES_KEY))
    documents = [int(d) for d in column.document_indices]
    if len(documents) - 1 != rows:
        raise ValueError(f"{prefix}: {rows} prompts but {len(documents) - 1} image documents; "
                         f"re-run preprocessing")
    return [[column[j].tobytes() for j in range(documents[i], documents[i + 1])]
            for i in range(rows)]


def _value(text: str):
    """An additional key's value: preprocessing stores lists and objects as JSON text, so
    those come back as Python values; everything else stays text."""
    if text[:1] in "[{":
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            pass
    return text


def load_prompt_rows(path: Union[str, Path]) -> List[dict]:
    """Prompt rows from a jsonl prompt file or an indexed-dataset prefix."""
    from mindrl.data.prompt_file import read_prompt_file

    text = str(path)
    if text.endswith(MANIFEST_SUFFIX):
        text = text[: -len(MANIFEST_SUFFIX)]
    if text.endswith(".jsonl"):
        return read_prompt_file(text)
    if manifest_path(text).is_file():
        return read_indexed_prompts(text)
    raise FileNotFoundError(
        f"{path}: neither a .jsonl prompt file nor a preprocessed dataset prefix "
        f"(no {text}{MANIFEST_SUFFIX}); pass a .jsonl file, or the output_prefix written by "
        f"`examples/data/preprocess_data.sh NAME` (e.g. ./dataset/orz/data)")
