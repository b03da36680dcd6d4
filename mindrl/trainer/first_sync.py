"""The first sync of a fresh run, checked against the checkpoint both sides loaded.

When the actor's `load:` was converted from the HF directory vLLM loaded, both hold the same
weights, so the first sync must leave vLLM's weights as they are: a mapping-free check of
mindrl/ckpt/mapping/ (a verified sync only checks that vLLM holds what the actor meant to
send, which a wrong mapping entry gets consistently wrong on both sides). Both reads go
through the weight sync's target interface (weight_sync/target.py): an EngineFanout over
every engine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Dict, Optional, Sequence

import torch

from mindrl import device
from mindrl.config.cpu_notice import run_cpu_vllm
from mindrl.errors import WeightSyncError
from mindrl.weight_sync.engine_fanout import EngineFanout


def checkpoint_reference(run, engines: Sequence, log: Callable[[str], None]
                         ) -> Optional[Dict[str, torch.Tensor]]:
    """The engines' fingerprints before the first sync, when the check applies (None: it
    does not, and `log` says why when the directories differ)."""
    from mindrl.ckpt.mcore_io import read_model_info, resolve_checkpoint_dir

    cfg = run.actor_config
    if run.generate_config.verify_sync == "off" or not cfg.load:
        return None
    vllm_dtype = (run_cpu_vllm(run)["dtype"] if device.vllm_build().overrides_recipe_settings
                  else run.generate_config.dtype)
    if vllm_dtype in ("float32", "bfloat16", "float16") and vllm_dtype != cfg.params_dtype:
        log(f"first sync not checked against the checkpoint: the actor computes in "
            f"{cfg.params_dtype}, vLLM in {vllm_dtype}, so the sync rounds every weight "
            f"(every later sync is still verified)")
        return None
    source = read_model_info(resolve_checkpoint_dir(cfg.load)).extra.get("source", {})
    hf_dir = source.get("hf_dir") if isinstance(source, dict) else None
    if not hf_dir or Path(hf_dir).resolve() != Path(cfg.tokenizer_name_or_path).resolve():
        log(f"first sync not checked against the checkpoint: {cfg.load} was converted from "
            f"{hf_dir or 'an unrecorded directory'}, vLLM loaded {cfg.tokenizer_name_or_path}")
        return None
    found = EngineFanout(engines).fingerprint()
    return {name: d if d.dim() == 1 else d[0] for name, d in found.items()}


def check_first_sync(reference: Dict[str, torch.Tensor], engines: Sequence, hf_dir: str) -> None:
    """Every engine still holds the checkpoint's weights; else WeightSyncError naming them."""
    try:
        EngineFanout(engines).check_fingerprint(reference, strict=True)
    except WeightSyncError as e:
        raise WeightSyncError(
            f"the first weight sync changed weights that vLLM and the actor both loaded from "
            f"{hf_dir}: the HF <-> mcore mapping (mindrl/ckpt/mapping/) sends them wrong, or "
            f"actor_config.load is not that checkpoint's conversion; nothing was generated. "
            f"{e}") from None
