"""The recipe a training checkpoint was made with, and what changed since.

A resume that silently changes the batch arithmetic or the model shape trains something else
than the run it continues, so each checkpoint records, in a readable JSON file beside the
tensors, the keys that must match (model shape, batch sizes, samples per prompt) and the
layout it was saved at (TP/PP/DP, which may change: see layout_change). Resuming compares the
two and names every key that changed, old -> new.

    <save>/iter_0000010/mindrl_recipe.json
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from mindrl.config.checks.asynchronous import staleness_bound

RECIPE_FILE = "mindrl_recipe.json"

# ModelSpec fields that decide the tensors' shapes (and so what a checkpoint can load into).
MODEL_KEYS = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads",
              "num_query_groups", "kv_channels", "vocab_size", "make_vocab_size_divisible_by",
              "untie_embeddings_and_output_weights", "add_qkv_bias", "head")
# Keys that may differ on resume without changing what is trained (resharding is supported).
LAYOUT_PREFIX = "layout."
# The staleness bound may change on resume: nothing generated is saved (a resume generates the
# batches that were in flight again), so the new bound holds from the first resumed step.
STALENESS = "max_staleness"


def layout(tp: int, pp: int, dp: int, ep: int = 1, etp: Optional[int] = None) -> Dict[str, int]:
    """The sizes a checkpoint records; expert parallelism only above 1 (a record without it,
    older checkpoints' included, is at EP 1), expert TP only where it is not the TP (a
    record without it is at expert TP = TP)."""
    out = {"tp": int(tp), "pp": int(pp), "dp": int(dp)}
    if ep > 1:
        out["ep"] = int(ep)
    if etp is not None and etp != tp:
        out["etp"] = int(etp)
    return out


def describe_layout(lay: Mapping[str, Any]) -> str:
    """"TP2 PP1 DP1" ("TP1 PP1 EP2 DP2" with experts split, "TP2 PP1 EP2 ETP1 DP1" with
    whole experts over the TP ranks); a size the record lacks is left out (older checkpoints
    know no DP)."""
    return " ".join(f"{k.upper()}{lay[k]}" for k in ("tp", "pp", "ep", "etp", "dp") if k in lay)


def model_recipe(spec) -> Dict[str, Any]:
    fields = spec.to_dict()
    return {k: fields.get(k) for k in MODEL_KEYS}


def run_recipe(run) -> Dict[str, Any]:
    """What the trainer's config says the actor checkpoint should record (same keys as the
    engine writes, plus the trainer's batch arithmetic), for comparing before a resume."""
    cfg, res = run.actor_config, run.resource("actor")
    tp, pp = cfg.tensor_model_parallel_size, cfg.pipeline_model_parallel_size
    return {**trainer_recipe(run), "model": model_recipe(run.models["actor"]),
            "layout": layout(tp, pp, res.count // (tp * pp), cfg.expert_model_parallel_size,
                             cfg.expert_tensor_parallel_size),
            "params_dtype": cfg.params_dtype, "micro_batch_size": cfg.micro_batch_size}


def trainer_recipe(run) -> Dict[str, Any]:
    """The batch arithmetic and the staleness bound (0: synchronous): what the trainer passes
    as extra["recipe"] when it saves."""
    return {"global_batch_size": run.megatron_training.global_batch_size,
            "mini_batch_size": run.rl_config.mini_batch_size,
            "n_samples_per_prompt": run.rl_config.n_samples_per_prompt,
            "max_staleness": staleness_bound(run.rl_config)}


def write_recipe(ckpt_dir, recipe: Mapping[str, Any]) -> None:
    (Path(ckpt_dir) / RECIPE_FILE).write_text(json.dumps(recipe, indent=2, sort_keys=True)
                                              + "\n")


def read_recipe(ckpt_dir) -> Optional[Dict[str, Any]]:
    """The recorded recipe, or None for a checkpoint written before recipes were recorded."""
    path = Path(ckpt_dir) / RECIPE_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError as e:
        raise ValueError(f"{path} is unreadable ({e}); restore it from a copy of the run or "
                         f"delete it to resume without the recipe check") from e


def _flat(d: Mapping[str, Any], prefix: str = "") -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, Mapping):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def recipe_changes(saved: Mapping[str, Any], current: Mapping[str, Any]
                   ) -> Dict[str, Tuple[Any, Any]]:
    """{dotted key: (saved, current)} for keys both recipes hold with different values.
    A key only one side holds is not a change (older checkpoints record fewer)."""
    old, new = _flat(saved), _flat(current)
    return {k: (old[k], new[k]) for k in sorted(old.keys() & new.keys()) if old[k] != new[k]}


def resume_messages(saved: Optional[Mapping[str, Any]], current: Mapping[str, Any],
                    ckpt_dir) -> List[str]:
    """Lines for the resume log: what a changed staleness bound means, a warning naming the
    recipe keys that changed, and a note when the layout changed (the checkpoint is
    resharded)."""
    if saved is None:
        return []
    changes = recipe_changes(saved, current)
    bound = changes.pop(STALENESS, None)
    recipe = {k: v for k, v in changes.items() if not k.startswith(LAYOUT_PREFIX)}
    out = []
    if bound is not None:
        out.append(f"{ckpt_dir} was trained with staleness bound {bound[0]}, resuming with "
                   f"{bound[1]} (rl_config.async_mode / max_staleness): steps up to the "
                   f"checkpoint trained on samples at most {bound[0]} versions old, every step "
                   f"from here at most {bound[1]} (no sample was saved: the batches in flight "
                   f"are generated again)")
    if recipe:
        listed = "; ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in recipe.items())
        out.append(f"WARNING: resuming {ckpt_dir} with a changed recipe ({listed}); the run "
                   f"continues, but it no longer trains what the checkpoint's run did. Restore "
                   f"these keys or start a new run directory to avoid this.")
    if len(recipe) < len(changes):
        out.append(f"resharding {ckpt_dir}: saved at {describe_layout(saved.get('layout', {}))}"
                   f", loading at {describe_layout(current.get('layout', {}))}")
    return out
