"""Image recipes end to end: geometry3k-layout rows -> resized images, prompts rendered by the
processor's chat template, the images sidecar, counted rejects; parquet, arrow and jsonl."""

import io
import json
from pathlib import Path

import pytest
from support.geo3k_rows import BAD, JPEG, NO_IMAGES, ROWS, TWO_IMAGES, geo3k_rows, write_geo3k

from mindrl.data.indexed import load_prompt_rows, open_indexed
from mindrl.data.preprocess import (PreprocessConfig, PreprocessError, load_vision_setup,
                                    preprocess)

MIN_PIXELS, MAX_PIXELS = 3136, 50176     # the tiny processor's own bounds
KEPT = [n for n in range(1, ROWS + 1) if n not in BAD]


@pytest.fixture(scope="module")
def processor_dir(tmp_path_factory):
    from mindrl.models.processors import write_vl_tokenizer_and_processor

    out = tmp_path_factory.mktemp("vl") / "tiny-vl"
    write_vl_tokenizer_and_processor(out, MIN_PIXELS, MAX_PIXELS)
    return out


@pytest.fixture(scope="module")
def processor(processor_dir):
    from mindrl.models.processors import load_vl_processor

    return load_vl_processor(processor_dir)


def _config(input_path, processor_dir, prefix, **kw):
    base = dict(input=str(input_path), tokenizer_name_or_path=str(processor_dir),
                output_prefix=str(prefix), handler_name="geometry3k_vl",
                prompt_type="qwen_vl_boxed", max_prompt_length=400, log_interval=0)
    base.update(kw)
    return PreprocessConfig.from_dict(base)


def _png_size(data: bytes):
    from PIL import Image

    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(io.BytesIO(data)) as image:
        return image.height, image.width


def _expected_size(raw: bytes):
    """transformers' own smart_resize of the original size, within the recipe's bounds."""
    from PIL import Image
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    with Image.open(io.BytesIO(raw)) as image:
        return smart_resize(image.height, image.width, 28, MIN_PIXELS, MAX_PIXELS)


@pytest.fixture(scope="module")
def parquet_run(tmp_path_factory, processor_dir):
    folder = tmp_path_factory.mktemp("geo3k")
    rows = geo3k_rows()
    cfg = _config(write_geo3k(rows, folder, "parquet"), processor_dir, folder / "out" / "train")
    return rows, cfg, preprocess(cfg, progress=False)


def test_counts_rejects_and_manifest(parquet_run):
    rows, cfg, manifest = parquet_run
    prefix = cfg.output_prefix
    assert manifest["counts"] == {"total": 20, "kept": 16, "rejected": 4, "rejected_by_reason": {
        "image_count_mismatch": 1, "image_too_small": 1, "missing_key": 1,
        "undecodable_image": 1}}
    rejects = [json.loads(line) for line in Path(prefix + "_rejects.jsonl").read_text().split("\n")
               if line]
    assert {r["row"]: r["reason"] for r in rejects} == BAD
    details = {r["row"]: r["detail"] for r in rejects}
    assert "2 <image> marker(s) in the question for 1 image(s)" in details[8]
    assert "'answer'" in details[12] and "400x4 px" in details[16]
    images = sum(len(rows[n - 1]["images"]) for n in KEPT)
    assert images == 16 and manifest["images"] == {
        "key": "images", "format": "png", "count": images, "min_pixels": MIN_PIXELS,
        "max_pixels": MAX_PIXELS}
    folder = Path(prefix).parent
    assert sorted(p.name for p in folder.iterdir()) == manifest["files"] == sorted(
        f"train_{k}.{e}" for k in ("images", "input_ids", "labels") for e in ("bin", "idx")) + [
        "train_manifest.json", "train_rejects.jsonl"]
    column = open_indexed(prefix, "images")       # one document per kept row
    assert len(column.document_indices) == 17 and len(column) == images


def test_rows_read_back_with_images_byte_for_byte(parquet_run, processor):
    """load_prompt_rows gives the written PNG bytes; each image is the smart_resize size, which
    the processor keeps (its grid), so vl_prompts expands the one pad to (h/14)(w/14)/4."""
    from mindrl.data.handlers import resolve_map_keys
    from mindrl.data.preprocess import process_row
    from mindrl.data.templates import get_template
    from mindrl.data.vl_prompts import VisionPrompts, decode_image

    rows, cfg, _ = parquet_run
    read = load_prompt_rows(cfg.output_prefix)
    assert [r["label"] for r in read] == [str(n) for n in KEPT]
    vision = load_vision_setup(cfg)
    template, keys = get_template(cfg.prompt_type), resolve_map_keys(cfg.handler_name, {})
    prompts = VisionPrompts(processor)
    for number, row in zip(KEPT, read):
        written = process_row(rows[number - 1], cfg, processor.tokenizer, template, keys, vision)
        assert row["images"] == written["images"] and row["prompt_ids"] == written["input_ids"]
        raw = [image["bytes"] for image in rows[number - 1]["images"]]
        assert len(row["images"]) == len(raw) == {NO_IMAGES: 0, TWO_IMAGES: 2}.get(number, 1)
        sizes = [_png_size(png) for png in row["images"]]
        assert sizes == [_expected_size(b) for b in raw]
        assert all(h % 28 == 0 and w % 28 == 0 and MIN_PIXELS <= h * w <= MAX_PIXELS
                   for h, w in sizes)
        ready = prompts.prepare(row, f"row {number}")
        if sizes:
            assert ready.image_grid_thw.tolist() == [[1, h // 14, w // 14] for h, w in sizes]
            # lossless: the stored pixels are exactly what PIL's bicubic resize gave
            original = decode_image(raw[0]).resize(sizes[0][::-1], 3)
            assert decode_image(row["images"][0]).tobytes() == original.tobytes()
        tokens = sum((h // 14) * (w // 14) // 4 for h, w in sizes)
        assert len(ready.prompt_ids) == len(row["prompt_ids"]) - len(sizes) + tokens
    assert read[KEPT.index(NO_IMAGES)]["images"] == []
    assert _png_size(read[KEPT.index(JPEG)]["images"][0])     # JPEG in, PNG stored


def test_prompt_is_the_processors_chat_template(parquet_run, processor):
    """Three rows (one with 2 images, one with none): the ids are exactly the processor's
    chat template over hand-built messages, tokenized with one pad per image."""
    from mindrl.data.templates import get_template

    rows, cfg, _ = parquet_run
    read = {int(r["label"]): r for r in load_prompt_rows(cfg.output_prefix)}
    fmt = get_template("qwen_vl_boxed").user.replace("{question}", "")
    image = {"type": "image"}
    by_hand = {
        1: [image, {"type": "text", "text": "In the figure, find x for case 1." + fmt}],
        TWO_IMAGES: [{"type": "text", "text": "Compare "}, image, {"type": "text",
                                                                   "text": " with "},
                     image, {"type": "text", "text": ": which angle is larger?" + fmt}],
        NO_IMAGES: [{"type": "text", "text": rows[NO_IMAGES - 1]["problem"] + fmt}],
    }
    pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    for number, content in by_hand.items():
        text = processor.apply_chat_template([{"role": "user", "content": content}],
                                             add_generation_prompt=True, tokenize=False)
        expected = processor.tokenizer(text)["input_ids"]
        assert read[number]["prompt_ids"] == expected, number
        assert expected.count(pad) == len(rows[number - 1]["images"])
        assert read[number]["prompt"] == text
    assert "<image>" not in "".join(r["prompt"] for r in read.values())


@pytest.mark.parametrize("kind", ["arrow", "jsonl"])
def test_arrow_and_jsonl_inputs_give_the_same_rows(tmp_path, parquet_run, processor_dir, kind):
    rows, parquet_cfg, parquet_manifest = parquet_run
    cfg = _config(write_geo3k(rows, tmp_path / kind, kind), processor_dir, tmp_path / "o" / kind)
    manifest = preprocess(cfg, progress=False)
    assert manifest["counts"] == parquet_manifest["counts"]
    assert load_prompt_rows(cfg.output_prefix) == load_prompt_rows(parquet_cfg.output_prefix)


def test_expanded_length_bound_and_missing_image_file(tmp_path, processor_dir, processor):
    """max_prompt_length counts each image at its expanded size (the processor's own count):
    a limit of exactly that keeps the row, one less rejects it."""
    from mindrl.data.vl_prompts import decode_image

    rows = [geo3k_rows()[TWO_IMAGES - 1]]
    path = write_geo3k(rows, tmp_path / "in", "jsonl")
    cfg = _config(path, processor_dir, tmp_path / "a" / "d", max_prompt_length=4000)
    preprocess(cfg, progress=False)
    (row,) = load_prompt_rows(cfg.output_prefix)
    out = processor(text=[row["prompt"]], images=[decode_image(b) for b in row["images"]])
    expanded = len(out["input_ids"][0])
    assert expanded > len(row["prompt_ids"]) + 2
    cfg = _config(path, processor_dir, tmp_path / "b" / "d", max_prompt_length=expanded)
    assert preprocess(cfg, progress=False)["counts"]["kept"] == 1
    cfg = _config(path, processor_dir, tmp_path / "c" / "d", max_prompt_length=expanded - 1)
    with pytest.raises(PreprocessError, match="every row was rejected.*too_long"):
        preprocess(cfg, progress=False)
    (tmp_path / "in" / "images" / f"{TWO_IMAGES}-1.png").unlink()
    cfg = _config(path, processor_dir, tmp_path / "d" / "d", strict=True)
    with pytest.raises(PreprocessError, match="row 1 rejected: missing_image: image 1"):
        preprocess(cfg, progress=False)


def test_text_recipe_rejects_image_rows(tmp_path, parquet_run, processor_dir):
    rows, _, _ = parquet_run
    cfg = PreprocessConfig.from_dict(dict(
        input=str(write_geo3k(rows, tmp_path, "parquet")), tokenizer_name_or_path="char",
        output_prefix=str(tmp_path / "t" / "d"), handler_name="geometry3k",
        prompt_type="empty", max_prompt_length=200))
    manifest = preprocess(cfg, progress=False)
    assert manifest["counts"]["kept"] == 1 and "images" not in manifest     # the text row
    reasons = manifest["counts"]["rejected_by_reason"]
    assert reasons == {"has_images": 19}
    (row,) = load_prompt_rows(cfg.output_prefix)
    assert "images" not in row and row["label"] == str(NO_IMAGES)
    reject = json.loads(Path(cfg.output_prefix + "_rejects.jsonl").read_text().split("\n")[0])
    assert reject["row"] == 1 and "geometry3k_vl" in reject["detail"]


def test_config_errors(tmp_path, processor_dir):
    with pytest.raises(PreprocessError, match="min_pixels / max_pixels are for image"):
        PreprocessConfig.from_dict(dict(input="x", tokenizer_name_or_path="char",
                                        output_prefix="o", handler_name="r1_math",
                                        min_pixels=3136))
    with pytest.raises(PreprocessError, match="'images' is always written"):
        _config("x", processor_dir, "o", dataset_additional_keys=["labels", "images"])
    cfg = _config("x", processor_dir, "o", min_pixels=262144, max_pixels=4194304)
    with pytest.raises(PreprocessError, match=r"within the processor's bounds \[3136, 50176\]"):
        load_vision_setup(cfg)
    with pytest.raises(PreprocessError, match="make_tiny_model.py --model tiny-qwen25vl"):
        load_vision_setup(_config("x", "char", "o"))
