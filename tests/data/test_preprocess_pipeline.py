"""Preprocessing end to end: indexed output, manifest, rejects, strict mode, prompt loading."""

import io
import json
from pathlib import Path

import pytest

from mindrl.data.indexed import load_prompt_rows, open_indexed, read_indexed_prompts
from mindrl.data.preprocess import PreprocessConfig, PreprocessError, preprocess

FIXTURE = Path(__file__).parent / "fixtures" / "preprocess_math.jsonl"
KEPT = {1: ("1+2=", "3"), 2: ("4+4=", "8"), 7: ("5+0=", "5"), 10: ("3+3=", "6")}
REJECTS = {3: "missing_key", 4: "empty_label", 5: "undecodable", 6: "too_long", 9: "bad_json"}


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    from mindrl.models.tiny import make_tiny_model

    return make_tiny_model("tiny-qwen2", "char", tmp_path_factory.mktemp("m") / "tiny")


def _config(tmp_path, tokenizer, **kw):
    base = dict(input=str(FIXTURE), tokenizer_name_or_path=str(tokenizer),
                output_prefix=str(tmp_path / "out" / "data"), handler_name="r1_math",
                prompt_type="empty", max_prompt_length=32, log_interval=2)
    base.update(kw)
    return PreprocessConfig.from_dict(base)


def test_jsonl_end_to_end(tmp_path, tokenizer_dir):
    from mindrl.models.tokenizers import load_tokenizer

    cfg = _config(tmp_path, tokenizer_dir)
    manifest = preprocess(cfg, progress=False)
    prefix = cfg.output_prefix
    assert manifest["counts"] == {"total": 9, "kept": 4, "rejected": 5, "rejected_by_reason": {
        "bad_json": 1, "empty_label": 1, "missing_key": 1, "too_long": 1, "undecodable": 1}}
    assert manifest["keys"] == ["input_ids", "labels"] and manifest["template"] == "empty"
    assert json.loads(Path(prefix + "_manifest.json").read_text()) == manifest
    lines = Path(prefix + "_rejects.jsonl").read_text().splitlines()
    rejects = [json.loads(line) for line in lines]
    assert {r["row"]: r["reason"] for r in rejects} == REJECTS
    assert not list((tmp_path / "out").glob("*.tmp*"))

    tok = load_tokenizer(tokenizer_dir)
    expected = [tok.encode(prompt, add_special_tokens=False) for prompt, _ in KEPT.values()]
    ids = open_indexed(prefix, "input_ids")
    assert [[int(t) for t in ids[i]] for i in range(len(ids))] == expected
    rows = read_indexed_prompts(prefix)
    assert [(r["prompt"], r["label"]) for r in rows] == list(KEPT.values())
    assert [r["prompt_ids"] for r in rows] == expected
    assert load_prompt_rows(prefix) == rows == load_prompt_rows(prefix + "_manifest.json")


def test_strict_fails_naming_the_row_and_leaves_nothing(tmp_path, tokenizer_dir):
    cfg = _config(tmp_path, tokenizer_dir, strict=True)
    with pytest.raises(PreprocessError, match=r"row 3 rejected: missing_key"):
        preprocess(cfg, progress=False)
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


@pytest.mark.slow
def test_cli_strict_and_template_with_qwen25_on_parquet(tmp_path, capsys):
    import datasets

    from cli.preprocess_data import main
    from mindrl.data.templates import render_prompt
    from mindrl.models.tokenizers import build_qwen25_tokenizer

    data = tmp_path / "gsm.parquet"
    datasets.Dataset.from_list([
        {"question": "Ann has 3 pens and buys 2. How many?", "answer": "3+2=5\n#### 5"},
        {"question": "Bad row", "answer": "no marker"},
    ]).to_parquet(str(data))
    recipe = tmp_path / "gsm.yaml"
    recipe.write_text(f"input: {data}\ntokenizer_name_or_path: qwen25\n"
                      f"output_prefix: {tmp_path}/gsm/data\nhandler_name: gsm8k\n"
                      f"prompt_type: qwen_r1\n")
    with pytest.raises(SystemExit) as e:
        main(["--config", str(recipe), "--strict", "--no-progress"])
    assert e.value.code == 2 and "row 2 rejected: no_final_answer" in capsys.readouterr().err
    assert main(["--config", str(recipe), "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["kept"] == 1
    rows = load_prompt_rows(tmp_path / "gsm" / "data")
    prompt = render_prompt("qwen_r1", "Ann has 3 pens and buys 2. How many?")
    assert rows == [{"prompt": prompt, "label": "5", "prompt_ids":
                     build_qwen25_tokenizer().encode(prompt, add_special_tokens=False)}]


def test_load_prompt_rows_jsonl_and_errors(tmp_path):
    from mindrl.data.prompt_file import write_prompt_file

    path = write_prompt_file([{"prompt": "1+1=", "label": "2"}], tmp_path / "p.jsonl")
    assert load_prompt_rows(path) == [{"prompt": "1+1=", "label": "2"}]
    with pytest.raises(FileNotFoundError, match=r"nowhere.*preprocess_data.sh"):
        load_prompt_rows(tmp_path / "nowhere")


def test_config_errors(tmp_path):
    with pytest.raises(PreprocessError, match="unknown key"):
        PreprocessConfig.from_dict({"input": "x", "tokenizer_name_or_path": "char",
                                    "output_prefix": "o", "typo": 1})
    cfg = _config(tmp_path, tmp_path / "no-such-model")
    with pytest.raises(PreprocessError, match="make_tiny_model.py"):
        preprocess(cfg, progress=False)


DAPO_WRAPPED = ("Solve the following math problem step by step. The last line of your response "
                "should be of the form Answer: $Answer (without quotes) where $Answer is the "
                "answer to the problem.\n\nFind $a + b + c$.\n\nRemember to put your answer on "
                "its own line after \"Answer:\".")

# One raw row per shipped recipe, in its dataset's own column layout, and what the recipe must
# make of it: (tokenizer kind standing in for the recipe's model directory, row, question text
# the prompt must contain, label). tiny_arith's row is read from its shipped input file.
RECIPE_ROWS = {
    "r1_zero_qwen25_7b": ("qwen25", {"problem": " What is $2^{10}$? ", "answer": " 1024 "},
                          "What is $2^{10}$?", "1024"),
    "gsm8k_qwen25": ("qwen25", {"question": "Tom has 3 apples and buys 4. How many?",
                                "answer": "He has 3 + 4 = 7 apples.\n#### 7"},
                     "Tom has 3 apples and buys 4. How many?", "7"),
    "countdown_qwen25": ("qwen25", {"nums": [3, 5, 7], "target": 22},
                         "Using the numbers [3, 5, 7], create an equation that equals 22.",
                         '{"numbers": [3, 5, 7], "target": 22}'),
    "tiny_arith": ("char", None, None, None),
    # the agent recipes (Qwen3's tokenizer: the qwen25 kind stands in, the same BPE for text)
    **{name: ("qwen25", {"data_source": "math_dapo", "ability": "MATH",
                         "prompt": [{"role": "user", "content": DAPO_WRAPPED}],
                         "reward_model": {"ground_truth": "34", "style": "rule"}},
              "Find $a + b + c$.", "34")
       for name in ("dapo_math_17k_qwen25", "dapo_math_17k_qwen3", "opd_dapo_math_17k_qwen3")},
    **{name: ("qwen25", {"ID": "2024-I-1", "Problem": "Find $m+n$.", "Solution": "...",
                         "Answer": 204}, "Find $m+n$.", "204")
       for name in ("aime2024_qwen25", "aime2024_qwen3", "opd_aime2024_qwen3")},
    "search_r1_nq_hotpotqa_qwen25": ("qwen25", {"id": "train_0", "question": "who wrote hamlet",
                                                "golden_answers": ["William Shakespeare"]},
                                     "Question: who wrote hamlet?", '["William Shakespeare"]'),
    # image recipes: "vl" = a char-tokenizer Qwen2.5-VL processor dir standing in for the model's
    "geo3k_qwen25vl": ("vl", {"problem": "<image>Find x. Round to the nearest tenth.",
                              "answer": "7.2", "images": [{"bytes": "300x200", "path": None}]},
                       "Find x. Round to the nearest tenth.", "7.2"),
    "tiny_vl_shapes": ("vl", {"problem": "<image>Big shape colour: 1 red, 2 green, 3 blue, "
                                         "4 yellow?", "answer": "3",
                              "images": [{"bytes": "56x56", "path": "0.png"}]},
                       "Big shape colour: 1 red, 2 green, 3 blue, 4 yellow?", "3"),
}


def _vl_recipe_row(row, tmp_path):
    """The recipe's processor (a tiny one with Qwen2.5-VL's real pixel bounds) and the row with
    its "WxH" image placeholders drawn as PNG bytes."""
    from support.synthetic_images import synthetic_image

    from mindrl.models.processors import write_vl_tokenizer_and_processor

    model = tmp_path / "vl-model"
    if not model.is_dir():
        write_vl_tokenizer_and_processor(model, min_pixels=3136, max_pixels=12845056)
    images = []
    for image in row["images"]:
        width, height = map(int, image["bytes"].split("x"))
        buffer = io.BytesIO()
        synthetic_image(height, width, seed=width).save(buffer, format="PNG")
        images.append({**image, "bytes": buffer.getvalue()})
    return model, {**row, "images": images}


def test_shipped_recipes_load_and_make_prompts_and_labels(tmp_path):
    """Every recipe in configs/datasets loads, and turns a row of its dataset into what the
    trainer reads: input_ids (the rendered template around the question, within
    max_prompt_length) and labels (the verifier's label), nothing else; an image recipe adds
    its images, each resized into the recipe's pixel bounds."""
    from mindrl.data.handlers import resolve_map_keys
    from mindrl.data.preprocess import load_config, load_vision_setup, process_row
    from PIL import Image

    from mindrl.data.vl_images import image_token_count
    from mindrl.data.templates import get_template
    from mindrl.models.tokenizers import load_tokenizer
    from mindrl.paths import REPO_ROOT, config_dir

    shipped = sorted(p.stem for p in (config_dir() / "datasets").glob("*.yaml"))
    assert shipped == sorted(RECIPE_ROWS), "a shipped recipe without a row in RECIPE_ROWS"
    tokenizers = {}
    for name, (kind, row, question, label) in RECIPE_ROWS.items():
        cfg = load_config(name)
        if row is None:      # the recipe's own input, shipped in the repo
            first = (REPO_ROOT / cfg.input).read_text().splitlines()[0]
            row = json.loads(first)
            question, label = row["problem"], row["answer"]
        template = get_template(cfg.prompt_type)
        keys = resolve_map_keys(cfg.handler_name, cfg.map_keys)
        if kind == "vl":
            model, row = _vl_recipe_row(row, tmp_path)
            cfg.tokenizer_name_or_path = str(model)
            vision = load_vision_setup(cfg)
            tok = vision.processor.tokenizer
            out = process_row(row, cfg, tok, template, keys, vision)
            assert sorted(out) == ["images", "input_ids", "labels"], name
            assert tok.decode(out["labels"]) == label, name
            prompt = tok.decode(out["input_ids"])
            assert question in prompt and "<image>" not in prompt, name
            assert prompt.count("<|image_pad|>") == len(out["images"]) == 1, name
            width, height = Image.open(io.BytesIO(out["images"][0])).size
            assert cfg.min_pixels <= width * height <= cfg.max_pixels, name
            expanded = len(out["input_ids"]) - 1 + image_token_count(height, width)
            assert 0 < expanded <= cfg.max_prompt_length, name
            continue
        tok = tokenizers.get(kind) or tokenizers.setdefault(kind, load_tokenizer(kind))
        out = process_row(row, cfg, tok, template, keys)
        assert list(out) == ["input_ids", "labels"], name
        assert tok.decode(out["labels"]) == label, name
        prompt = tok.decode(out["input_ids"])
        before, after = template.render("\x00").split("\x00")    # the template's own text
        assert prompt.startswith(before) and prompt.endswith(after), name
        assert question in prompt, name
        assert 0 < len(out["input_ids"]) <= cfg.max_prompt_length, name
