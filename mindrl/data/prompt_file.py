"""Prompt files the trainer reads: jsonl rows {"prompt": str, "label": str, ...}.

(The indexed-dataset output of preprocessing will be the second reader; both give the
trainer the same rows.) Bad rows fail with the file, the row number and the fix.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, List


def write_prompt_file(rows: Iterable[dict], path) -> Path:
    """Atomic write (temp file + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    tmp.replace(path)
    return path


def read_prompt_file(path) -> List[dict]:
    path = Path(path)
    rows = []
    with open(path) as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{number}: not valid JSON ({e.msg}); each line must be "
                                 f'one object like {{"prompt": "...", "label": "..."}}') from None
            missing = [k for k in ("prompt", "label") if not isinstance(row.get(k), str)]
            if missing:
                raise ValueError(f"{path}:{number}: missing string field(s) {missing}; each "
                                 f'line needs "prompt" and "label"')
            rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no prompts; generate or preprocess a dataset first")
    return rows
