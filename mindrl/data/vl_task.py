"""A synthetic image-question dataset in geometry3k's layout, drawn with PIL offline.

Every answer needs the picture (a colour, a shape, a count, a digit), answers are balanced
within each question kind, and the test split is drawn from other random draws and checked by
image hash never to repeat a training image, so test accuracy measures seeing, not recall.
The ``colour`` kind is the tiny CPU default: one small image (56 x 56 px = 4 LLM tokens), one
big shape whose colour is the answer digit 1-3, which the ``arith`` verifier scores; the other
kinds (shape, count, digit, two-image compare, or all of them: ``mixed``) are richer data in
the same columns: problem (with `<image>` markers), answer, images as [{bytes, path}].
"""

from __future__ import annotations

import hashlib
import io
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Sequence, Tuple, Union

COLOURS: Tuple[Tuple[str, Tuple[int, int, int]], ...] = (
    ("red", (225, 30, 30)), ("green", (30, 185, 30)), ("blue", (30, 30, 225)),
    ("yellow", (235, 200, 20)))
SHAPES = ("circle", "square", "triangle", "cross")
BACKGROUND = (245, 245, 245)

# The tiny default's question is short: every prompt token is work in the rollout, the
# reference pass and the update, and the random-init model reads only the picture.
QUESTIONS = {
    "colour": "<image>1 red 2 green 3 blue?",
    "shape": "<image>Which shape is drawn? Answer 1 circle, 2 square, 3 triangle, 4 cross.",
    "count": "<image>How many shapes are in the picture?",
    "digit": "<image>Which digit is written in the picture?",
    "compare": "Picture 1: <image> Picture 2: <image> Which picture has more shapes, 1 or 2?",
}
ANSWERS = {"colour": "123", "shape": "1234", "count": "1234", "digit": "0123456789",
           "compare": "12"}
KINDS = tuple(QUESTIONS) + ("mixed",)
MIXED = ("shape", "count", "digit", "compare")      # the geometry3k-like kinds


@dataclass(frozen=True)
class VLTaskRow:
    problem: str
    answer: str
    images: Tuple[bytes, ...]     # PNG bytes, in marker order
    kind: str


def _png(image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _canvas(size: int):
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (size, size), BACKGROUND)
    return image, ImageDraw.Draw(image)


def _shape(draw, shape: str, cx: float, cy: float, r: float, fill) -> None:
    box = (cx - r, cy - r, cx + r, cy + r)
    if shape == "circle":
        draw.ellipse(box, fill=fill)
    elif shape == "square":
        draw.rectangle(box, fill=fill)
    elif shape == "triangle":
        draw.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=fill)
    else:   # cross
        w = max(1.0, r / 3)
        draw.rectangle((cx - w, cy - r, cx + w, cy + r), fill=fill)
        draw.rectangle((cx - r, cy - w, cx + r, cy + w), fill=fill)


def _cells(rng: random.Random, size: int, count: int) -> List[Tuple[float, float, float]]:
    """`count` (cx, cy, r) spots in distinct cells of a 3 x 3 grid: shapes never touch."""
    cell = size / 3
    r = cell * 0.32
    spots = rng.sample(range(9), count)
    return [((s % 3 + 0.5) * cell + rng.uniform(-0.1, 0.1) * cell,
             (s // 3 + 0.5) * cell + rng.uniform(-0.1, 0.1) * cell, r) for s in spots]


def draw_colour(rng: random.Random, answer: int, size: int) -> List[bytes]:
    """One big shape in colour `answer` covering most of the picture, so that every image
    token sees it: the tiny default's question, learnable by a 2.4M model in minutes. Three
    colours that differ pairwise in two channels (red, green, blue): with small shapes of
    other colours beside the big one the tiny model settled at 2 of 4 colours, and with four
    big-shape colours (any fourth differs from a primary in one channel) at 3 of 4."""
    image, draw = _canvas(size)
    r = size * rng.uniform(0.36, 0.46)
    cx, cy = (size / 2 + rng.uniform(-0.08, 0.08) * size for _ in range(2))
    _shape(draw, rng.choice(SHAPES[:2]), cx, cy, r, COLOURS[answer - 1][1])
    return [_png(image)]


def draw_shape(rng: random.Random, answer: int, size: int) -> List[bytes]:
    image, draw = _canvas(size)
    r = size * rng.uniform(0.25, 0.38)
    _shape(draw, SHAPES[answer - 1], rng.uniform(r, size - r), rng.uniform(r, size - r), r,
           rng.choice(COLOURS)[1])
    return [_png(image)]


def _draw_count(rng: random.Random, count: int, size: int) -> bytes:
    image, draw = _canvas(size)
    for cx, cy, r in _cells(rng, size, count):
        _shape(draw, rng.choice(SHAPES), cx, cy, r, rng.choice(COLOURS)[1])
    return _png(image)


def draw_count(rng: random.Random, answer: int, size: int) -> List[bytes]:
    return [_draw_count(rng, answer, size)]


def draw_digit(rng: random.Random, answer: int, size: int) -> List[bytes]:
    from PIL import ImageFont

    image, draw = _canvas(size)
    font = ImageFont.load_default(size=int(size * rng.uniform(0.55, 0.75)))
    left, top, right, bottom = draw.textbbox((0, 0), str(answer), font=font)
    x = rng.uniform(0, max(0.0, size - (right - left))) - left
    y = rng.uniform(0, max(0.0, size - (bottom - top))) - top
    draw.text((x, y), str(answer), fill=rng.choice(COLOURS)[1], font=font)
    return [_png(image)]


def draw_compare(rng: random.Random, answer: int, size: int) -> List[bytes]:
    """Two pictures with different shape counts; `answer` (1 or 2) has more."""
    few, many = sorted(rng.sample(range(1, 6), 2))
    counts = (many, few) if answer == 1 else (few, many)
    return [_draw_count(rng, c, size) for c in counts]


DRAW: Dict[str, Callable[[random.Random, int, int], List[bytes]]] = {
    "colour": draw_colour, "shape": draw_shape, "count": draw_count, "digit": draw_digit,
    "compare": draw_compare}


def image_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def vl_task_rows(question: str, count: int, seed: int, size: int,
                 avoid: Sequence[str] = (), max_tries: int = 100) -> List[VLTaskRow]:
    """`count` rows of one kind (or `mixed`), answers balanced within each kind; no image
    whose hash is in `avoid` (redrawn up to `max_tries` times, then an error)."""
    if question not in KINDS:
        raise ValueError(f"unknown question kind {question!r}; choose one of {list(KINDS)}")
    if count < 0 or size < 28:
        raise ValueError(f"count={count} must be >= 0 and size={size} >= 28 px")
    rng = random.Random(seed)
    kinds = [MIXED[i % len(MIXED)] if question == "mixed" else question for i in range(count)]
    seen: Dict[str, int] = {}
    plan = []
    for kind in kinds:   # the i-th row of a kind gets that kind's (i mod #answers)-th answer
        plan.append((kind, ANSWERS[kind][seen.get(kind, 0) % len(ANSWERS[kind])]))
        seen[kind] = seen.get(kind, 0) + 1
    rng.shuffle(plan)
    avoid = set(avoid)
    rows = []
    for kind, answer in plan:
        for _ in range(max_tries):
            images = DRAW[kind](rng, int(answer), size)
            if not any(image_hash(image) in avoid for image in images):
                break
        else:
            raise ValueError(f"{kind}: no image unlike the avoided ones in {max_tries} draws at "
                             f"{size} px; use a larger size or fewer rows")
        rows.append(VLTaskRow(QUESTIONS[kind], answer, tuple(images), kind))
    return rows


def _write_parquet(rows: Sequence[VLTaskRow], path: Path, split: str) -> Path:
    """geometry3k's columns (id, problem, answer, images as a list of Image) plus kind."""
    import datasets

    features = datasets.Features({
        "id": datasets.Value("string"), "problem": datasets.Value("string"),
        "answer": datasets.Value("string"), "kind": datasets.Value("string"),
        "images": datasets.List(datasets.Image())})
    table = {"id": [], "problem": [], "answer": [], "kind": [], "images": []}
    for i, row in enumerate(rows):
        table["id"].append(f"{split}-{i}")
        table["problem"].append(row.problem)
        table["answer"].append(row.answer)
        table["kind"].append(row.kind)
        table["images"].append([{"bytes": image, "path": f"{split}-{i}-{j}.png"}
                                for j, image in enumerate(row.images)])
    tmp = path.with_name(path.name + ".tmp")
    datasets.disable_progress_bars()
    datasets.Dataset.from_dict(table, features=features).to_parquet(str(tmp))
    tmp.replace(path)
    return path


def write_vl_task(out_dir: Union[str, Path], num_train: int, num_val: int, seed: int = 0,
                  question: str = "colour", size: int = 56) -> Dict[str, Path]:
    """Write ``train.parquet`` and ``test.parquet`` (held out: no test image is a training
    image) into `out_dir`; returns {"train": path, "test": path}."""
    if num_train < 1 or num_val < 1:
        raise ValueError(f"num_train={num_train} and num_val={num_val} must be >= 1")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    train = vl_task_rows(question, num_train, seed * 2, size)
    trained = {image_hash(image) for row in train for image in row.images}
    test = vl_task_rows(question, num_val, seed * 2 + 1, size, avoid=trained)
    return {"train": _write_parquet(train, out_dir / "train.parquet", "train"),
            "test": _write_parquet(test, out_dir / "test.parquet", "test")}
