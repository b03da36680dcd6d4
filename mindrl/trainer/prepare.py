"""Make the artifacts a recipe's `prepare` section asks for, when they are missing.

For the embedded CPU default: a tiny random-init HF model (with prepare.warm_start, warm-
started over it: models/warm_start.py), its Megatron conversion (through
the converter CLI, in its own process, exactly as a user runs it) and the generated task file;
with rl_config.reward_model, a tiny random-init reward model too (HF dir `<reward load>-hf`);
with a teacher (rl_config.distill_loss), a tiny random-init teacher of teacher_config's model
(HF dir `<teacher load>-hf`, another seed: a teacher that differs, not one with the skill).
Existing artifacts are left alone, so a rerun resumes instead of starting over.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import List

from mindrl.config.schema import RunConfig
from mindrl.paths import REPO_ROOT


def _convert_to_mcore(hf_dir: Path, save_dir: Path, spec, key: str) -> None:
    """The converter run as a user runs it; its refusal (a path it cannot write) as a
    ValueError naming the recipe key that chose `save_dir`."""
    cmd = [sys.executable, str(REPO_ROOT / "cli" / "convert_ckpt.py"), "--use-mcore-models",
           "--model-type", "GPT", "--load-model-type", "hf", "--save-model-type", "mg",
           "--target-tensor-parallel-size", "1", "--target-pipeline-parallel-size", "1",
           "--load-dir", str(hf_dir), "--save-dir", str(save_dir),
           "--model-type-hf", _hf_family(spec)]
    if spec.add_qkv_bias:
        cmd.append("--add-qkv-bias")
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        said = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        raise ValueError(f"{key}={save_dir}: converting the tiny model {hf_dir} there failed: "
                         f"{said[-1] if said else result.stderr[-3000:]}. Fix: point {key} "
                         f"at a Megatron checkpoint, or at a path that does not exist yet for "
                         f"the tiny model's conversion to be made there")


def _hf_family(spec) -> str:
    """The converter's --model-type-hf for a spec: the first its family declares (the VL
    family's own when it has a vision tower)."""
    from mindrl.ckpt import registry

    return registry.mapping_of(spec.family).model_type_hf[0]


def prepare_artifacts(run: RunConfig) -> List[str]:
    """What was made (human-readable lines); nothing when everything exists."""
    made: List[str] = []
    p = run.prepare
    shared = run.megatron_training
    if p.task in _TASKS:    # first: a split it cannot honour is refused before a model is made
        made += _TASKS[p.task](p, shared.data_path, run.rl_config.val_data_path)
    if p.tiny_model:
        made += _prepare_tiny_models(run)
    if p.task == "vl":       # after the model: its processor preprocesses the images
        made += _prepare_vl(p, shared, run.rl_config.val_data_path)
    return made


def _prepare_tiny_models(run: RunConfig) -> List[str]:
    """The tiny HF model (tokenizer and, for a VL model, processor), its Megatron conversion
    and, with a reward role, a tiny reward model; with a teacher role, a tiny teacher."""
    from mindrl.ckpt.mcore_io import TRACKER
    from mindrl.config.names import role_key
    from mindrl.models.tiny import make_tiny_model

    made: List[str] = []
    p, shared = run.prepare, run.megatron_training
    hf_dir = Path(shared.tokenizer_name_or_path)
    if not (hf_dir / "config.json").is_file():
        made.append(_make_base(p, hf_dir))
    load = run.actor_config.load
    if load and not (Path(load) / TRACKER).is_file():
        _convert_to_mcore(hf_dir, Path(load), run.models["actor"],
                          role_key(run, "actor", "load"))
        made.append(f"Megatron checkpoint (torch_dist, any TP/PP): {load}")
    rm_load = run.reward_config.load if "reward" in run.active_roles else None
    if rm_load and not (Path(rm_load) / TRACKER).is_file():
        rm_hf = Path(rm_load + "-hf")
        if not (rm_hf / "config.json").is_file():
            make_tiny_model(p.tiny_model, p.tokenizer, rm_hf, seed=p.seed + 1, head="scalar")
        _convert_to_mcore(rm_hf, Path(rm_load), run.models["reward"],
                          role_key(run, "reward", "load"))
        made.append(f"tiny reward model {p.tiny_model} (scalar head): {rm_hf} -> {rm_load}")
    made += _prepare_tiny_teacher(run)
    return made


def _make_base(p, hf_dir: Path) -> str:
    """The actor's tiny HF model: random-init, or with prepare.warm_start its warm start
    over a random-init one (made beside it and removed)."""
    import shutil

    from mindrl.models.tiny import make_tiny_model

    what = f"tiny HF model {p.tiny_model} ({p.tokenizer} tokenizer)"
    if not p.warm_start:
        make_tiny_model(p.tiny_model, p.tokenizer, hf_dir, seed=p.seed)
        return f"{what}: {hf_dir}"
    from mindrl.models.warm_start import warm_start

    init = hf_dir.with_name(f".{hf_dir.name}.random-init")
    shutil.rmtree(init, ignore_errors=True)      # a killed earlier prepare's
    make_tiny_model(p.tiny_model, p.tokenizer, init, seed=p.seed)
    try:
        losses = warm_start(init, hf_dir, p.warm_start, p.warm_start_steps, p.seed)
    finally:
        shutil.rmtree(init, ignore_errors=True)
    return (f"{what}, warm start {p.warm_start} for {p.warm_start_steps} steps (loss "
            f"{losses[0]:.2f} -> {sum(losses[-20:]) / len(losses[-20:]):.2f}): {hf_dir}")


def _prepare_tiny_teacher(run: RunConfig) -> List[str]:
    """A random-init teacher of teacher_config's model with the run's tokenizer (seed + 2:
    neither the actor's nor the reward model's weights), converted to teacher_config.load."""
    from mindrl.ckpt.mcore_io import TRACKER
    from mindrl.config.names import role_key
    from mindrl.models.tiny import make_tiny_model

    load = run.role("teacher").load if "teacher" in run.active_roles else None
    if not load or (Path(load) / TRACKER).is_file():
        return []
    p, spec = run.prepare, run.models["teacher"]
    hf_dir = Path(load + "-hf")
    if not (hf_dir / "config.json").is_file():
        make_tiny_model(spec.name, p.tokenizer, hf_dir, seed=p.seed + 2)
    _convert_to_mcore(hf_dir, Path(load), spec, role_key(run, "teacher", "load"))
    return [f"tiny teacher {spec.name} (seed {p.seed + 2}): {hf_dir} -> {load}"]


def _prepare_vl(p, shared, val_prefix) -> List[str]:
    """Synthetic image questions (train, and a test split of images never trained on) in
    geometry3k's layout, preprocessed as a user's data is: the dataset recipe `p.vl_dataset`
    with the run's tokenizer dir and prefixes (data/preprocess.py)."""
    import dataclasses

    from mindrl.data.indexed import manifest_path
    from mindrl.data.preprocess import load_config, preprocess
    from mindrl.data.vl_task import write_vl_task

    prefixes = {"train": shared.data_path, "test": val_prefix}
    todo = {split: prefix for split, prefix in prefixes.items()
            if prefix and not manifest_path(prefix).is_file()}
    if not todo:
        return []
    raw = Path(shared.data_path).parent / "raw"
    files = write_vl_task(raw, p.num_prompts, p.num_val_prompts, seed=p.seed,
                          question=p.vl_question, size=p.image_size)
    recipe = load_config(p.vl_dataset)
    made = []
    for split, prefix in todo.items():
        manifest = preprocess(dataclasses.replace(
            recipe, input=str(files[split]), output_prefix=str(prefix),
            tokenizer_name_or_path=shared.tokenizer_name_or_path), progress=False)
        kind = "validation prompts on images never trained on" if split == "test" \
            else "training prompts"
        made.append(f"{p.vl_question} image task, {manifest['counts']['kept']} {kind} "
                    f"({p.image_size} px, recipe {p.vl_dataset}): {prefix}")
    return made


def _prepare_arith(p, train_path, val_path) -> List[str]:
    """Training prompts drawn from the pairs not held out; validation = each held-out pair
    once (with no pairs held out: every problem once, i.e. the training table)."""
    from mindrl.data.arith_task import arith_problems, arith_split, problem

    train, held = arith_split(p.max_operand, p.holdout_pairs, p.seed)
    return _write_task(
        lambda: arith_problems(p.num_prompts, p.max_operand, p.seed, pairs=train if held else ()),
        lambda: [problem(a, b) for a, b in held or train], held, train_path, val_path,
        f"arith task over {len(train)} operand pairs (operands 0..{p.max_operand})")


def _prepare_arith_tool(p, train_path, val_path) -> List[str]:
    """The tool task (a+b= with operands up to max_operand, e.g. 999): training prompts from
    every pair but the held-out ones, validation = each held-out pair once."""
    from mindrl.data.arith_task import arith_problems_except, arith_random_split, problem

    _, held = arith_random_split(p.max_operand, p.holdout_pairs, p.seed)
    return _write_task(lambda: arith_problems_except(p.num_prompts, p.max_operand, held, p.seed),
                       lambda: [problem(a, b) for a, b in held], held, train_path, val_path,
                       f"arith tool task (operands 0..{p.max_operand})")


def _prepare_max(p, train_path, val_path) -> List[str]:
    """The larger of two digits: training prompts from the pairs not held out, validation =
    each held-out pair once (none held out: every pair once)."""
    from mindrl.data.max_task import max_problem, max_problems, max_split

    train, held = max_split(p.holdout_pairs, p.seed)
    return _write_task(lambda: max_problems(p.num_prompts, train, p.seed),
                       lambda: [max_problem(a, b) for a, b in held or train], held,
                       train_path, val_path, f"max-of-two-digits task over {len(train)} pairs")


def _write_task(train_problems, val_problems, held, train_path, val_path, what) -> List[str]:
    """Write the missing prompt files (rows {"prompt", "label"}) and say what was made."""
    from mindrl.data.prompt_file import write_prompt_file

    made = []
    if train_path and not Path(train_path).is_file():
        rows = [{"prompt": q.prompt, "label": q.label} for q in train_problems()]
        write_prompt_file(rows, train_path)
        made.append(f"{what}, {len(rows)} prompts: {train_path}")
    if val_path and not Path(val_path).is_file():
        rows = [{"prompt": q.prompt, "label": q.label} for q in val_problems()]
        write_prompt_file(rows, val_path)
        kind = "held-out pairs never trained on" if held else "every training problem"
        made.append(f"validation set, {len(rows)} prompts ({kind}): {val_path}")
    return made


_TASKS = {"arith": _prepare_arith, "max": _prepare_max,   # prepare.task -> its writer
          "arith_tool": _prepare_arith_tool}
