"""The search tool's local corpus: a jsonl of {"id", "text"} (tools/search.py ranks it with BM25).

A dataset recipe names it beside its questions (PreprocessConfig corpus_input / corpus_output):
preprocessing then also writes the corpus, one passage a line, from a jsonl or parquet of
passages in the layouts in use: {"id", "text"}, Search-R1 / FlashRAG's {"id", "contents"}
(wiki-18.jsonl) or {"id", "title", "text"} (DPR's psgs_w100). A title is put in front of
the text as `"Title"` and a new line, the way wiki-18's contents carry theirs. A passage
without text is skipped and counted; `max_docs` keeps the first N (the search tool indexes the
whole file in memory in every tool worker: see docs/guides/agentic.md for its size). Written
under a temporary name and renamed, so a crashed run never leaves half a corpus.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, Iterator, Mapping, Optional, Union

TEXT_KEYS = ("text", "contents", "content", "passage")
ID_KEYS = ("id", "docid", "_id")


def _passages(path: Path) -> Iterator[Mapping[str, Any]]:
    if path.suffix == ".jsonl":
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if line.strip():
                    try:
                        yield json.loads(line)
                    except json.JSONDecodeError as e:
                        raise ValueError(f"{path}:{number}: not a JSON line ({e.msg})") from None
        return
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        for batch in pq.ParquetFile(str(path)).iter_batches(batch_size=4096):
            yield from batch.to_pylist()
        return
    raise ValueError(f"{path}: a corpus is a .jsonl or .parquet file of passages")


def passage(row: Mapping[str, Any], number: int) -> Optional[Dict[str, str]]:
    """{"id", "text"} of one input passage (its line number is the id when it has none), or
    None when it has no text."""
    text = next((row[k] for k in TEXT_KEYS if isinstance(row.get(k), str)), None)
    if text is None or not text.strip():
        return None
    title = row.get("title")
    if isinstance(title, str) and title.strip() and \
            not text.lstrip().startswith(f'"{title.strip()}"'):
        text = f'"{title.strip()}"\n{text}'
    doc_id = next((row[k] for k in ID_KEYS if row.get(k) is not None), number)
    return {"id": str(doc_id), "text": text.strip()}


def write_corpus(source: Union[str, Path], output: Union[str, Path],
                 max_docs: Optional[int] = None) -> Dict[str, Any]:
    """Write the corpus; what was done: {"input", "output", "docs", "skipped"}."""
    source, output = Path(source), Path(output)
    if not source.is_file():
        raise FileNotFoundError(f"corpus_input {source} does not exist")
    if max_docs is not None and max_docs < 1:
        raise ValueError(f"corpus_max_docs must be >= 1, not {max_docs}")
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f"{output.name}.tmp{os.getpid()}")
    docs = skipped = 0
    try:
        with open(tmp, "w", encoding="utf-8") as out:
            for number, row in enumerate(_passages(source), 1):
                if max_docs is not None and docs >= max_docs:
                    break
                doc = passage(row, number) if isinstance(row, Mapping) else None
                if doc is None:
                    skipped += 1
                    continue
                out.write(json.dumps(doc, ensure_ascii=False) + "\n")
                docs += 1
        if docs == 0:
            raise ValueError(f"{source}: no passage with text (keys {', '.join(TEXT_KEYS)})")
        tmp.replace(output)
    finally:
        tmp.unlink(missing_ok=True)
    return {"input": str(source), "output": str(output), "docs": docs, "skipped": skipped}
