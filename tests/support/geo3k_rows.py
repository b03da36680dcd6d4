"""Geometry3K-layout rows built here (no hub): 20 rows, 4 of them bad, written as parquet (with
the hub's Image features), arrow or jsonl (images as paths relative to the file)."""

import io
import json
from pathlib import Path

from support.synthetic_images import synthetic_image

ROWS = 20
# 1-based row number -> the reject reason preprocessing must give it.
BAD = {4: "undecodable_image", 8: "image_count_mismatch", 12: "missing_key",
       16: "image_too_small"}
TWO_IMAGES, NO_IMAGES, JPEG = 5, 3, 6


def _encode(height, width, seed, fmt="PNG") -> bytes:
    buffer = io.BytesIO()
    synthetic_image(height, width, seed).save(buffer, format=fmt)
    return buffer.getvalue()


def geo3k_rows():
    """[{"problem", "answer", "images": [{"bytes", "path"}]}], row i (1-based) at index i-1."""
    rows = []
    for number in range(1, ROWS + 1):
        sizes = [(30 + 3 * number, 70 - 2 * number)]
        problem = f"<image>In the figure, find x for case {number}."
        if number == TWO_IMAGES:
            sizes.append((90, 40))
            problem = "Compare <image> with <image>: which angle is larger?"
        if number == NO_IMAGES:
            sizes, problem = [], "A square has side 3. What is its area?"
        images = [{"bytes": _encode(h, w, seed=100 * number + j,
                                    fmt="JPEG" if number == JPEG else "PNG"),
                   "path": f"{number}-{j}.png"} for j, (h, w) in enumerate(sizes)]
        row = {"problem": problem, "answer": str(number), "images": images}
        if number == 4:
            row["images"] = [{"bytes": b"\x89PNG this is not an image", "path": "4-0.png"}]
        elif number == 8:
            row["problem"] = "<image> and <image>: find y."
        elif number == 12:
            row["answer"] = None
        elif number == 16:
            row["images"] = [{"bytes": _encode(4, 400, seed=16), "path": "16-0.png"}]
        rows.append(row)
    return rows


def features():
    import datasets

    return datasets.Features({"problem": datasets.Value("string"),
                              "answer": datasets.Value("string"),
                              "images": datasets.List(datasets.Image())})


def write_geo3k(rows, folder: Path, kind: str) -> Path:
    """The rows as `kind` (parquet / arrow / jsonl) under `folder`; returns the input path."""
    import datasets

    folder.mkdir(parents=True, exist_ok=True)
    if kind == "jsonl":
        (folder / "images").mkdir(exist_ok=True)
        path = folder / "train.jsonl"
        with open(path, "w") as f:
            for row in rows:
                paths = []
                for image in row["images"]:
                    name = f"images/{image['path']}"
                    (folder / name).write_bytes(image["bytes"])
                    paths.append(name)
                out = {k: v for k, v in row.items() if k != "images" and v is not None}
                f.write(json.dumps({**out, "images": paths}) + "\n")
        return path
    dataset = datasets.Dataset.from_list(rows, features=features())
    if kind == "parquet":
        path = folder / "train.parquet"
        dataset.to_parquet(str(path))
        return path
    dataset.save_to_disk(str(folder / "saved"))
    (path,) = (folder / "saved").glob("*.arrow")
    return path
