"""`search(query, top_k)`: BM25 (Okapi) over a local corpus, no network.

The corpus is a jsonl file of {"id": ..., "text": ...} that a dataset recipe prepares
(`ToolLimits.search_corpus`); each worker indexes it once, at its first search. Small and pure
Python: tokens are lower-cased runs of letters and digits, scores the classic
idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avglen)) with idf = ln(1 + (N - n + 0.5) /
(n + 0.5)), which is never negative.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections import Counter
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from . import context
from .errors import ToolError

MAX_TOP_K = 10
MAX_DOC_CHARS = 1000          # each result's text is cut to this in the answer
_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)


def tokenize(text: str) -> List[str]:
    return _TOKEN.findall(text.lower())


class BM25:
    """An in-memory index of (id, text) documents."""

    def __init__(self, docs: Sequence[Tuple[str, str]], k1: float = 1.5, b: float = 0.75):
        self.ids = [str(i) for i, _ in docs]
        self.texts = [t for _, t in docs]
        self.k1, self.b = k1, b
        self.tfs = [Counter(tokenize(t)) for t in self.texts]
        self.lengths = [sum(tf.values()) for tf in self.tfs]
        self.avg = (sum(self.lengths) / len(self.lengths)) if self.lengths else 0.0
        df: Counter = Counter()
        for tf in self.tfs:
            df.update(tf.keys())
        n = len(self.tfs)
        self.idf: Dict[str, float] = {w: math.log(1 + (n - c + 0.5) / (c + 0.5))
                                      for w, c in df.items()}
        self.postings: Dict[str, List[int]] = {}
        for d, tf in enumerate(self.tfs):
            for w in tf:
                self.postings.setdefault(w, []).append(d)

    def scores(self, query: str) -> Dict[int, float]:
        out: Dict[int, float] = {}
        for w in set(tokenize(query)):
            idf = self.idf.get(w)
            if idf is None:
                continue
            for d in self.postings[w]:
                tf = self.tfs[d][w]
                norm = self.k1 * (1 - self.b + self.b * self.lengths[d] / (self.avg or 1.0))
                out[d] = out.get(d, 0.0) + idf * tf * (self.k1 + 1) / (tf + norm)
        return out

    def top(self, query: str, k: int) -> List[Tuple[str, str, float]]:
        """The k best (id, text, score), best first; ties keep corpus order."""
        ranked = sorted(self.scores(query).items(), key=lambda kv: (-kv[1], kv[0]))[:k]
        return [(self.ids[d], self.texts[d], s) for d, s in ranked]


def load_corpus(path: str) -> List[Tuple[str, str]]:
    """(id, text) per line of a jsonl file; ValueError naming the file and line when bad."""
    docs = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                docs.append((str(row["id"]), str(row["text"])))
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"{path}:{number}: a corpus line must be a JSON object with "
                                 f"\"id\" and \"text\" ({type(e).__name__}: {e})") from e
    return docs


_INDEXES: Dict[Tuple[str, float, int], BM25] = {}
_INDEX_LOCK = threading.Lock()    # a worker runs several calls at once, in threads


def index_for(path: str) -> BM25:
    """The corpus's index, built once per process (rebuilt if the file changed); calls at once
    wait for the one that builds it."""
    stat = Path(path).stat()
    key = (str(Path(path).resolve()), stat.st_mtime, stat.st_size)
    with _INDEX_LOCK:
        index = _INDEXES.get(key)
        if index is None:
            _INDEXES.clear()
            index = _INDEXES[key] = BM25(load_corpus(path))
    return index


def search(query: str, top_k: int = 3) -> str:
    """Search the local document collection and answer the best matching passages.

    Args:
        query: words to look for.
        top_k: how many passages to answer (1 to 10).
    """
    if not 1 <= top_k <= MAX_TOP_K:
        raise ToolError(f"top_k must be between 1 and {MAX_TOP_K}, got {top_k}")
    corpus = context.current().limits.search_corpus
    if not corpus:
        raise ToolError("search has no corpus on this run (ToolLimits.search_corpus: a jsonl "
                        "of {\"id\", \"text\"} a dataset recipe prepares)")
    try:
        index = index_for(corpus)
    except OSError as e:
        raise ToolError(f"search corpus {corpus} cannot be read: {e.strerror or e}") from None
    except ValueError as e:
        raise ToolError(str(e)) from None
    hits = index.top(query, top_k)
    if not hits:
        return "no results"
    lines = []
    for rank, (doc_id, text, _) in enumerate(hits, 1):
        if len(text) > MAX_DOC_CHARS:
            text = text[:MAX_DOC_CHARS] + " ..."
        lines.append(f"[{rank}] ({doc_id}) {text}")
    return "\n".join(lines)
