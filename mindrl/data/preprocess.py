"""Preprocessing: raw dataset -> handler -> template -> token ids -> Megatron indexed dataset.

Driven by configs/datasets/NAME.yaml (see PreprocessConfig). Bad rows are not fatal unless
``strict``: each is counted by reason in ``<prefix>_manifest.json`` and listed in
``<prefix>_rejects.jsonl``, so a 57k-row run does not die on row 31,204 and the losses stay
visible. Every output file is written under a temporary name and renamed at the end, manifest
last, so a crashed run never leaves a prefix that looks complete.

Image recipes (a vision handler such as geometry3k_vl) read the model's processor from
``tokenizer_name_or_path``: each image is resized once within ``min_pixels`` / ``max_pixels``
(data/vl_images.py), the question is rendered with the processor's chat template (one image pad
per image) and the resized PNG bytes go to ``<prefix>_images.{bin,idx}``: a uint8 indexed
dataset, one document per kept row and one sequence per image.

Search recipes (``corpus_input`` / ``corpus_output``) also write the search tool's corpus, a
jsonl of {"id", "text"} passages (data/search_corpus.py), recorded in the manifest.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import random
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

from mindrl.data.handlers import RowRejected, get_handler, is_vision_handler, resolve_map_keys
from mindrl.data.indexed import (IMAGES_KEY, INPUT_KEY, REJECTS_SUFFIX, key_prefix,
                                 manifest_path)
from mindrl.data.templates import IMAGE_MARKER, get_template
from mindrl.data.vl_images import resize_row_images
from mindrl.models.tokenizers import TokenizerNotFound, load_tokenizer
from mindrl.paths import config_dir

logger = logging.getLogger(__name__)

MANIFEST_FORMAT = 1
DATASET_SUFFIXES = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".arrow": "arrow"}


class PreprocessError(ValueError):
    pass


@dataclass
class PreprocessConfig:
    input: str
    tokenizer_name_or_path: str
    output_prefix: str
    handler_name: str = "generic"
    prompt_type: str = "chatml"
    map_keys: Dict[str, str] = field(default_factory=dict)
    dataset_additional_keys: List[str] = field(default_factory=lambda: ["labels"])
    workers: int = 1
    seed: int = 1234
    shuffle: bool = False
    max_prompt_length: Optional[int] = None
    log_interval: int = 1000
    strict: bool = False
    # Image recipes only: the pixel bounds each image is resized into once (default: the
    # processor's own); they must lie within the processor's bounds.
    min_pixels: Optional[int] = None
    max_pixels: Optional[int] = None
    # Search recipes only: the passages the search tool ranks (data/search_corpus.py), written
    # beside the prompts as a jsonl of {"id", "text"} (agent_config.search_corpus reads it).
    corpus_input: Optional[str] = None
    corpus_output: Optional[str] = None
    corpus_max_docs: Optional[int] = None    # the first N passages; null = all

    @classmethod
    def from_dict(cls, raw: Dict[str, Any], source: str = "config") -> "PreprocessConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise PreprocessError(f"{source}: unknown key(s) {unknown}; known: {sorted(known)}")
        missing = [k for k in ("input", "tokenizer_name_or_path", "output_prefix")
                   if not raw.get(k)]
        if missing:
            raise PreprocessError(f"{source}: missing required key(s) {missing}")
        cfg = cls(**{k: v for k, v in raw.items()
                     if v is not None or k in ("max_prompt_length", "min_pixels", "max_pixels")})
        cfg.map_keys = dict(cfg.map_keys or {})
        cfg.dataset_additional_keys = list(cfg.dataset_additional_keys or [])
        for written in (INPUT_KEY, IMAGES_KEY):
            if written in cfg.dataset_additional_keys:
                raise PreprocessError(f"{source}: {written!r} is always written (images by "
                                      f"an image handler); list only extra keys")
        bounds = (cfg.min_pixels, cfg.max_pixels)
        if any(b is not None for b in bounds) and not is_vision_handler(cfg.handler_name):
            raise PreprocessError(f"{source}: min_pixels / max_pixels are for image handlers; "
                                  f"handler_name {cfg.handler_name!r} reads text only")
        if None not in bounds and not 0 < cfg.min_pixels <= cfg.max_pixels:
            raise PreprocessError(f"{source}: need 0 < min_pixels ({cfg.min_pixels}) <= "
                                  f"max_pixels ({cfg.max_pixels})")
        if cfg.workers < 1:
            raise PreprocessError(f"{source}: workers must be >= 1")
        if bool(cfg.corpus_input) != bool(cfg.corpus_output):
            raise PreprocessError(f"{source}: corpus_input and corpus_output go together (the "
                                  f"passages to read and the search corpus to write)")
        if cfg.corpus_max_docs is not None and (not cfg.corpus_input or cfg.corpus_max_docs < 1):
            raise PreprocessError(f"{source}: corpus_max_docs needs corpus_input and must be "
                                  f">= 1")
        return cfg


def dataset_config_path(name: str) -> Path:
    return config_dir() / "datasets" / f"{name}.yaml"


def load_config(name_or_path: Union[str, Path]) -> PreprocessConfig:
    """A recipe by name (configs/datasets/NAME.yaml) or by path."""
    import yaml

    path = Path(name_or_path)
    if not path.suffix:
        path = dataset_config_path(str(name_or_path))
    if not path.is_file():
        known = sorted(p.stem for p in (config_dir() / "datasets").glob("*.yaml"))
        raise PreprocessError(f"no dataset config {path}; known recipes: {known}")
    with open(path) as f:
        raw = yaml.safe_load(f) or {}
    return PreprocessConfig.from_dict(raw, source=str(path))


# ---------------------------------------------------------------------------- inputs

def _read_jsonl(path: Path) -> Iterator[Tuple[int, Any]]:
    """(line number, row or RowRejected): bad bytes or JSON reject one line, not the file."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                yield number, RowRejected("undecodable", f"invalid UTF-8 ({e.reason})")
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                yield number, RowRejected("bad_json", e.msg)
                continue
            if not isinstance(row, dict):
                yield number, RowRejected("bad_json", "line is not a JSON object")
                continue
            yield number, row


def _load_with_datasets(path: Path):
    """json/parquet/arrow files or a directory of them (or a save_to_disk dir), offline."""
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    import datasets

    datasets.disable_progress_bars()
    if path.is_dir() and any((path / n).is_file() for n in ("dataset_info.json", "state.json")):
        ds = datasets.load_from_disk(str(path))
        return ds["train"] if isinstance(ds, datasets.DatasetDict) else ds
    files = sorted(p for p in path.rglob("*") if p.suffix in DATASET_SUFFIXES) \
        if path.is_dir() else [path]
    builders = {DATASET_SUFFIXES.get(p.suffix) for p in files}
    if not files or None in builders or len(builders) != 1:
        raise PreprocessError(f"{path}: expected .jsonl/.json/.parquet/.arrow file(s) of one "
                              f"kind; found {[p.name for p in files[:5]] or 'none'}")
    return datasets.load_dataset(builders.pop(), data_files=[str(p) for p in files],
                                 split="train")


def read_rows(path: Union[str, Path]) -> List[Tuple[int, Any]]:
    """Every input row as (1-based row number, dict or RowRejected).

    .jsonl is read line by line so that one undecodable line is a reject, not a crash; the
    other formats go through the `datasets` library (offline), numbered by position.
    """
    path = Path(path)
    if not path.exists():
        raise PreprocessError(f"input {path} does not exist")
    if path.is_file() and path.suffix == ".jsonl":
        return list(_read_jsonl(path))
    return list(enumerate(_undecoded_rows(_load_with_datasets(path)), start=1))


def _undecoded_rows(dataset) -> Iterator[dict]:
    """Rows as stored: an Image column stays {"bytes", "path"} (the `datasets` formatter would
    decode it to PIL, and one bad image would stop the whole read)."""
    for table in dataset.with_format("arrow").iter(batch_size=1024):
        yield from table.to_pylist()


def input_base_dir(path: Union[str, Path]) -> Path:
    """The folder image paths in a dataset are relative to: the input's own folder."""
    path = Path(path).resolve()
    return path if path.is_dir() else path.parent


# ---------------------------------------------------------------------------- images

@dataclass
class VisionSetup:
    """What an image recipe needs beside the tokenizer: the checked processor and the bounds."""

    processor: Any
    min_pixels: int
    max_pixels: int
    base_dir: Path

    @property
    def image_pad_id(self) -> int:
        return self.processor.tokenizer.convert_tokens_to_ids(self.processor.image_token)


def load_vision_setup(cfg: PreprocessConfig) -> Optional[VisionSetup]:
    """The processor and pixel bounds of an image recipe (None for a text recipe); bounds
    outside the processor's are refused, since the processor would then resize again."""
    if not is_vision_handler(cfg.handler_name):
        return None
    from mindrl.data.vl_prompts import pixel_bounds
    from mindrl.models.processors import ProcessorError, load_vl_processor

    if not Path(cfg.tokenizer_name_or_path).is_dir():
        raise PreprocessError(f"handler {cfg.handler_name!r} reads images: "
                              f"tokenizer_name_or_path must be a Qwen2.5-VL model directory "
                              f"with its processor, not {cfg.tokenizer_name_or_path!r} (a tiny "
                              f"one: python cli/make_tiny_model.py --model tiny-qwen25vl "
                              f"--tokenizer char --out work/models/tiny-qwen25vl-hf)")
    try:
        processor = load_vl_processor(cfg.tokenizer_name_or_path)
    except ProcessorError as e:
        raise PreprocessError(str(e)) from None
    low, high = pixel_bounds(processor.image_processor)
    min_pixels = low if cfg.min_pixels is None else cfg.min_pixels
    max_pixels = high if cfg.max_pixels is None else cfg.max_pixels
    if not low <= min_pixels <= max_pixels <= high:
        raise PreprocessError(
            f"min_pixels {min_pixels} / max_pixels {max_pixels} must lie within the "
            f"processor's bounds [{low}, {high}] ({cfg.tokenizer_name_or_path}) and "
            f"min_pixels <= max_pixels: else the processor resizes the images again at training "
            f"time; change the recipe's min_pixels / max_pixels")
    return VisionSetup(processor, min_pixels, max_pixels, input_base_dir(cfg.input))


# ---------------------------------------------------------------------------- one row

_WORKER: Dict[str, Any] = {}


def _valid_text(text: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise RowRejected("undecodable", f"{what} has unpaired surrogates") from None
    if "\ufffd" in text:
        raise RowRejected("undecodable", f"{what} contains U+FFFD (a replaced bad byte)")


def process_row(row: Any, cfg: PreprocessConfig, tokenizer, template, map_keys,
                vision: Optional[VisionSetup] = None) -> Dict[str, List]:
    """Token ids per output key for one row (plus the resized PNG bytes under "images" for an
    image recipe), or RowRejected."""
    if isinstance(row, RowRejected):
        raise row
    question, label, extra = get_handler(cfg.handler_name)(row, map_keys)
    if not question.strip():
        raise RowRejected("empty_prompt", "prompt text is empty")
    if not label.strip():
        raise RowRejected("empty_label", "label is empty")
    _valid_text(question, "prompt")
    _valid_text(label, "label")
    if is_vision_handler(cfg.handler_name):
        if vision is None:
            raise ValueError(f"handler {cfg.handler_name!r} reads images: pass "
                             f"vision=load_vision_setup(cfg)")
        out = _image_prompt(question, extra, cfg, tokenizer, template, vision)
    else:
        prompt = template.render(question, system=extra.get("system"))
        ids = tokenizer.encode(prompt, add_special_tokens=False)
        if cfg.max_prompt_length and len(ids) > cfg.max_prompt_length:
            raise RowRejected("too_long", f"{len(ids)} prompt tokens > max_prompt_length "
                                          f"{cfg.max_prompt_length}")
        out = {INPUT_KEY: ids}
    for key in cfg.dataset_additional_keys:
        text = label if key in ("labels", "label") else extra.get(key, row.get(key))
        if text is None:
            raise RowRejected("missing_key", f"additional key {key!r} not in row")
        text = text if isinstance(text, str) else json.dumps(text)
        key_ids = tokenizer.encode(text, add_special_tokens=False)
        if tokenizer.decode(key_ids, skip_special_tokens=False) != text:
            raise RowRejected("not_round_trip", f"{key!r} text does not survive "
                                                f"tokenize/decode with this tokenizer")
        out[key] = key_ids
    return out


def _image_prompt(question: str, extra: Dict[str, Any], cfg: PreprocessConfig, tokenizer,
                  template, vision: VisionSetup) -> Dict[str, List]:
    """One image row: markers checked against images, images resized, the prompt rendered by
    the processor's chat template (one pad per image) and its expanded length bounded."""
    entries = extra.pop("images")
    markers = question.count(IMAGE_MARKER)
    if markers != len(entries):
        raise RowRejected("image_count_mismatch", f"{markers} {IMAGE_MARKER} marker(s) in the "
                                                  f"question for {len(entries)} image(s)")
    images = resize_row_images(entries, vision.base_dir, vision.min_pixels, vision.max_pixels)
    prompt = template.render_with_processor(vision.processor, question,
                                            system=extra.get("system"))
    ids = tokenizer.encode(prompt, add_special_tokens=False)
    pads = ids.count(vision.image_pad_id)
    if pads != len(images):
        raise RowRejected("image_count_mismatch", f"the rendered prompt holds {pads} image "
                                                  f"pad(s) for {len(images)} image(s)")
    expanded = len(ids) - len(images) + sum(image.tokens for image in images)
    if cfg.max_prompt_length and expanded > cfg.max_prompt_length:
        raise RowRejected("too_long", f"{expanded} prompt tokens with images expanded "
                                      f"({len(ids)} with one pad per image) > "
                                      f"max_prompt_length {cfg.max_prompt_length}")
    return {INPUT_KEY: ids, IMAGES_KEY: [image.png for image in images]}


def _init_worker(cfg: PreprocessConfig) -> None:
    if not _WORKER or _WORKER["cfg"] is not cfg:
        vision = load_vision_setup(cfg)
        tokenizer = vision.processor.tokenizer if vision else \
            load_tokenizer(cfg.tokenizer_name_or_path)
        _WORKER.update(cfg=cfg, tokenizer=tokenizer, vision=vision,
                       template=get_template(cfg.prompt_type),
                       map_keys=resolve_map_keys(cfg.handler_name, cfg.map_keys))


def _work(item: Tuple[int, Any]):
    number, row = item
    w = _WORKER
    try:
        return number, process_row(row, w["cfg"], w["tokenizer"], w["template"], w["map_keys"],
                                   vision=w["vision"])
    except RowRejected as e:
        return number, e


# ---------------------------------------------------------------------------- output

class _Outputs:
    """Builders writing to temporary files; commit() renames them into place."""

    def __init__(self, prefix: str, keys: List[str], vocab_size: int, images: bool = False):
        import numpy

        # Pure file I/O: no CUDA, so no CPU compat layer (and none of its import cost).
        from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder

        self.tag = f".tmp{os.getpid()}"
        self.prefix = prefix
        self.dtype = DType.optimal_dtype(vocab_size)
        self.numpy = numpy
        self.finals: List[Tuple[Path, Path]] = []
        self.builders = {}
        for key in keys:
            base = key_prefix(prefix, key)
            self.builders[key] = IndexedDatasetBuilder(self._tmp(base + ".bin"),
                                                       dtype=self.dtype)
        if images:   # one document per row, one uint8 sequence (PNG bytes) per image
            self.builders[IMAGES_KEY] = IndexedDatasetBuilder(
                self._tmp(key_prefix(prefix, IMAGES_KEY) + ".bin"), dtype=numpy.uint8)
        self.image_count = 0
        self.rejects = open(self._tmp(prefix + REJECTS_SUFFIX), "w")

    def _tmp(self, final: str) -> str:
        Path(final).parent.mkdir(parents=True, exist_ok=True)
        tmp = final + self.tag
        self.finals.append((Path(tmp), Path(final)))
        return tmp

    def add(self, ids_by_key: Dict[str, List[int]]) -> None:
        import torch

        for key, builder in self.builders.items():
            if key == IMAGES_KEY:
                for png in ids_by_key[key]:
                    builder.add_item(torch.frombuffer(bytearray(png), dtype=torch.uint8))
                self.image_count += len(ids_by_key[key])
            else:
                builder.add_item(torch.tensor(ids_by_key[key], dtype=torch.int64))
            builder.end_document()

    def file_names(self) -> List[str]:
        """The files commit() puts in place (the manifest lists them)."""
        return sorted({final.name for _, final in self.finals} |
                      {Path(key_prefix(self.prefix, key) + ".idx").name for key in self.builders}
                      | {manifest_path(self.prefix).name})

    def reject(self, number: int, e: RowRejected) -> None:
        self.rejects.write(json.dumps({"row": number, "reason": e.reason,
                                       "detail": e.detail}) + "\n")

    def commit(self, manifest: Dict) -> None:
        for key, builder in self.builders.items():
            builder.finalize(self._tmp(key_prefix(self.prefix, key) + ".idx"))
        self.rejects.close()
        with open(self._tmp(str(manifest_path(self.prefix))), "w") as f:
            json.dump(manifest, f, indent=2)
        for tmp, final in self.finals:  # manifest is last: it marks the prefix complete
            tmp.replace(final)

    def abort(self) -> None:
        for builder in self.builders.values():
            builder.data_file.close()
        self.rejects.close()
        for tmp, _ in self.finals:
            tmp.unlink(missing_ok=True)


def _results(items, cfg: PreprocessConfig):
    if cfg.workers == 1 or len(items) < 2:
        _init_worker(cfg)
        yield from map(_work, items)
        return
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    with ctx.Pool(cfg.workers, initializer=_init_worker, initargs=(cfg,)) as pool:
        chunk = max(1, min(256, len(items) // (cfg.workers * 8)))
        yield from pool.imap(_work, items, chunksize=chunk)


def preprocess(cfg: PreprocessConfig, progress: bool = True) -> Dict:
    """Run one recipe; returns the manifest written to ``<output_prefix>_manifest.json``."""
    from tqdm import tqdm

    start = time.time()
    vision = load_vision_setup(cfg)
    try:
        tokenizer = vision.processor.tokenizer if vision else \
            load_tokenizer(cfg.tokenizer_name_or_path)
    except TokenizerNotFound as e:
        raise PreprocessError(str(e)) from None
    template = get_template(cfg.prompt_type)
    map_keys = resolve_map_keys(cfg.handler_name, cfg.map_keys)
    items = read_rows(cfg.input)
    if cfg.shuffle:
        random.Random(cfg.seed).shuffle(items)
    _WORKER.update(cfg=cfg, tokenizer=tokenizer, template=template, map_keys=map_keys,
                   vision=vision)

    keys = [INPUT_KEY] + cfg.dataset_additional_keys
    out = _Outputs(cfg.output_prefix, keys, len(tokenizer), images=vision is not None)
    reasons: Counter = Counter()
    kept = 0
    try:
        bar = tqdm(total=len(items), desc="preprocess", unit="row", disable=not progress,
                   file=sys.stderr)
        for done, (number, result) in enumerate(_results(items, cfg), start=1):
            if isinstance(result, RowRejected):
                if cfg.strict:
                    raise PreprocessError(f"{cfg.input}: row {number} rejected: {result} "
                                          f"(strict mode; fix the row or set strict: false "
                                          f"to skip and list it in the rejects file)")
                reasons[result.reason] += 1
                out.reject(number, result)
            else:
                kept += 1
                out.add(result)
            bar.update(1)
            if cfg.log_interval and done % cfg.log_interval == 0:
                logger.info("processed %d/%d rows, kept %d", done, len(items), kept)
        bar.close()
        if kept == 0:
            raise PreprocessError(f"{cfg.input}: every row was rejected {dict(reasons)}; "
                                  f"check handler_name and map_keys")
        corpus = None
        if cfg.corpus_input:       # before the manifest, which marks the prefix complete
            from mindrl.data.search_corpus import write_corpus

            try:
                corpus = write_corpus(cfg.corpus_input, cfg.corpus_output, cfg.corpus_max_docs)
            except (OSError, ValueError) as e:
                raise PreprocessError(f"search corpus: {e}") from None
            logger.info("search corpus: %d passages -> %s", corpus["docs"], cfg.corpus_output)
        images = {"key": IMAGES_KEY, "format": "png", "count": out.image_count,
                  "min_pixels": vision.min_pixels, "max_pixels": vision.max_pixels} \
            if vision else None
        manifest = {
            "format": MANIFEST_FORMAT,
            "input": str(cfg.input),
            "tokenizer": str(Path(cfg.tokenizer_name_or_path).resolve())
            if Path(cfg.tokenizer_name_or_path).is_dir() else cfg.tokenizer_name_or_path,
            "tokenizer_class": type(tokenizer).__name__,
            "vocab_size": len(tokenizer),
            "template": cfg.prompt_type,
            "handler": cfg.handler_name,
            "map_keys": map_keys,
            "keys": keys,
            **({"images": images} if images else {}),
            **({"corpus": corpus} if corpus else {}),
            "dtype": out.dtype.__name__,
            "counts": {"total": len(items), "kept": kept, "rejected": sum(reasons.values()),
                       "rejected_by_reason": dict(sorted(reasons.items()))},
            "config": asdict(cfg),
            "files": out.file_names(),
            "seconds": round(time.time() - start, 3),
        }
        out.commit(manifest)
    except BaseException:
        out.abort()
        raise
    return manifest
