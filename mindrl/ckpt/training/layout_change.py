"""Loading a training checkpoint at another TP/PP/DP layout: decided before any tensor is read.

Model weights and (from the fully_reshardable format on) Adam's moments are stored as global,
model-space tensors, so they load at any layout. Two things do not carry over, and are refused
or skipped here with a message naming both layouts, instead of failing deep inside Megatron's
loader (a KeyError for a distributed-optimizer bucket, a global shape mismatch):
- a distributed optimizer saved in the older dp_reshardable format: flat per-bucket buffers,
  which only load at the TP/PP they were saved at;
- the RNG state: one stream per (PP, TP) rank, which maps onto nothing at another TP/PP
  (Megatron-LM skips it there too).
Expert parallelism and expert TP count as model parallelism here: experts are stored under
global numbers and whole shapes (Megatron's sharded state dict), so the weights load at another
EP or expert TP, while the expert-parallel RNG streams do not carry over. Between EP 1 and EP > 1 Megatron's optimizer changes shape: above
1 it keeps two (dense and expert parameters, saved as chained_0 / chained_1), at 1 one. Their
model-space moments are the same tensors under another key prefix, so such a load renames the
requested keys to the saved ones (`LoadPlan.rename_optimizer_keys`) and keeps the current
optimizer's parameter groups, with the saved Adam step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Tuple

from mindrl.ckpt.training.checkpoint_recipe import describe_layout

RESHARDABLE_OPTIM_FORMATS = ("fully_reshardable", "model_space")
LEGACY_OPTIM_FORMAT = "dp_reshardable"


@dataclass(frozen=True)
class LoadPlan:
    optim_format: str       # the distributed optimizer format to request (what was saved)
    load_rng: bool
    notes: Tuple[str, ...] = ()
    # The optimizer's chain changed (EP 1 <-> EP > 1): saved keys differ by their chained_N.
    rename_optimizer_keys: bool = False


def _model_parallel(lay: Mapping[str, Any]) -> Tuple[Any, Any, Any, Any]:
    return lay.get("tp"), lay.get("pp"), lay.get("ep", 1), lay.get("etp", lay.get("tp"))


def _expert_sizes(lay: Mapping[str, Any]) -> str:
    """The saved expert sizes a resume must also keep (", EP ... and expert TP ..."), where
    the record has them."""
    out = f", expert_model_parallel_size={lay['ep']}" if "ep" in lay else ""
    return out + (f", expert_tensor_parallel_size={lay['etp']}" if "etp" in lay else "")


def plan_load(saved_layout: Optional[Mapping[str, Any]], saved_format: str,
              current_layout: Mapping[str, Any], load_optim: bool, load_rng: bool,
              ckpt_dir) -> LoadPlan:
    """How to load `ckpt_dir` (saved at `saved_layout`, None when unknown: an older checkpoint
    is then assumed to be at the current layout, as before) at `current_layout`."""
    if saved_layout is None or _model_parallel(saved_layout) == _model_parallel(current_layout):
        return LoadPlan(saved_format, load_rng)    # DP alone may change in every format
    old, new = describe_layout(saved_layout), describe_layout(current_layout)
    saved_ep, ep = saved_layout.get("ep", 1), current_layout.get("ep", 1)
    rechained = load_optim and (saved_ep == 1) != (ep == 1)
    if rechained and saved_format != RESHARDABLE_OPTIM_FORMATS[0]:
        raise ValueError(
            f"{ckpt_dir} was saved at {old} and this run is at {new}: Megatron keeps one "
            f"optimizer at expert parallelism 1 and two (dense, experts) above it, and only a "
            f"distributed optimizer's {RESHARDABLE_OPTIM_FORMATS[0]} state (this one is "
            f"{saved_format}) maps from one to the other. Set actor_config.no_load_optim: true "
            f"to keep the weights and start Adam afresh, or resume at "
            f"actor_config.expert_model_parallel_size={saved_ep}")
    if load_optim and saved_format not in RESHARDABLE_OPTIM_FORMATS:
        raise ValueError(
            f"{ckpt_dir} was saved at {old} with its distributed-optimizer state in the "
            f"{saved_format} format, which loads only at the layout it was saved at; this run "
            f"is at {new}. Resume at actor_config.tensor_model_parallel_size="
            f"{saved_layout['tp']} and pipeline_model_parallel_size={saved_layout['pp']}"
            f"{_expert_sizes(saved_layout)} (save once there to get a "
            f"reshardable checkpoint), or set actor_config.no_load_optim: true to keep the "
            f"weights and start Adam afresh")
    notes = ()
    if load_rng:
        notes = (f"RNG state of {ckpt_dir} not restored: saved at {old}, loading at {new}, and "
                 f"its per-rank streams do not map across TP/PP/EP/ETP layouts (fresh RNG "
                 f"state)",)
    if rechained:
        held = {True: "one optimizer", False: "dense and expert optimizers"}
        notes += (f"Adam's state of {ckpt_dir}: saved at {old} ({held[saved_ep == 1]}), loaded "
                  f"into {held[ep == 1]} at {new}",)
    return LoadPlan(saved_format, False, notes, rechained)
