"""Make the artifacts a recipe's `prepare` section asks for, when they are missing.

For the embedded CPU default: a tiny random-init HF model, its Megatron conversion (through
the converter CLI, in its own process, exactly as a user runs it) and the generated task file;
with rl_config.reward_model, a tiny random-init reward model too (HF dir `<reward load>-hf`).
Existing artifacts are left alone, so a rerun resumes instead of starting over.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import List

from mindrl.config.schema import RunConfig
from mindrl.paths import REPO_ROOT


def _convert_to_mcore(hf_dir: Path, save_dir: Path, spec) -> None:
    cmd = [sys.executable, str(REPO_ROOT / "cli" / "convert_ckpt.py"), "--use-mcore-models",
           "--model-type", "GPT", "--load-model-type", "hf", "--save-model-type", "mg",
           "--target-tensor-parallel-size", "1", "--target-pipeline-parallel-size", "1",
           "--load-dir", str(hf_dir), "--save-dir", str(save_dir),
           "--model-type-hf", "qwen2" if spec.architecture == "qwen2" else "llama2"]
    if spec.add_qkv_bias:
        cmd.append("--add-qkv-bias")
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"converting {hf_dir} -> {save_dir} failed:\n{result.stderr[-3000:]}")


def prepare_artifacts(run: RunConfig) -> List[str]:
    """What was made (human-readable lines); nothing when everything exists."""
    from mindrl.ckpt.mcore_io import TRACKER

    made: List[str] = []
    p = run.prepare
    shared = run.megatron_training
    if p.tiny_model:
        from mindrl.models.tiny import make_tiny_model

        hf_dir = Path(shared.tokenizer_name_or_path)
        if not (hf_dir / "config.json").is_file():
            make_tiny_model(p.tiny_model, p.tokenizer, hf_dir, seed=p.seed)
            made.append(f"tiny HF model {p.tiny_model} ({p.tokenizer} tokenizer): {hf_dir}")
        load = run.actor_config.load
        if load and not (Path(load) / TRACKER).is_file():
            _convert_to_mcore(hf_dir, Path(load), run.models["actor"])
            made.append(f"Megatron checkpoint (torch_dist, any TP/PP): {load}")
        rm_load = run.reward_config.load if "reward" in run.active_roles else None
        if rm_load and not (Path(rm_load) / TRACKER).is_file():
            rm_hf = Path(rm_load + "-hf")
            if not (rm_hf / "config.json").is_file():
                make_tiny_model(p.tiny_model, p.tokenizer, rm_hf, seed=p.seed + 1, head="scalar")
            _convert_to_mcore(rm_hf, Path(rm_load), run.models["reward"])
            made.append(f"tiny reward model {p.tiny_model} (scalar head): {rm_hf} -> {rm_load}")
    if p.task == "arith" and shared.data_path and not Path(shared.data_path).is_file():
        from mindrl.data.arith import arith_problems
        from mindrl.data.prompt_file import write_prompt_file

        rows = [{"prompt": q.prompt, "label": q.label}
                for q in arith_problems(p.num_prompts, p.max_operand, p.seed)]
        write_prompt_file(rows, shared.data_path)
        made.append(f"arith task, {len(rows)} prompts (operands 0..{p.max_operand}): "
                    f"{shared.data_path}")
    val = run.rl_config.val_data_path
    if p.task == "arith" and val and not Path(val).is_file():
        from mindrl.data.arith import arith_problems
        from mindrl.data.prompt_file import write_prompt_file

        # Every problem once: the task has (max_operand + 1)^2 distinct questions.
        rows = [{"prompt": f"{a}+{b}=", "label": str(a + b)}
                for a in range(p.max_operand + 1) for b in range(p.max_operand + 1)]
        write_prompt_file(rows, val)
        made.append(f"arith validation set, {len(rows)} prompts: {val}")
    return made
