"""MindSpeed-RL's no-op layers, read as MindRL's uneven pipeline.

MindSpeed-RL fits a layer count the pipeline does not divide by padding the model with empty
layers: `num_layers: 96` with `noop_layers: "5,95"` puts Qwen3-235B-A22B's 94 layers on 16
stages of 6, stages 0 and 15 each holding one empty layer. MindRL holds no empty layers; the
same real layers per stage are Megatron's uneven split (decoder_first/last_pipeline_num_layers,
config/pipeline_stages.py), which a ported recipe gets here, before parsing. Empty layers on a
stage between the first and the last have no such reading and are refused, naming the fix.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from mindrl.config.errors import STRUCTURE, Problem

SECTIONS = ("megatron_training", "actor_config", "ref_config", "reward_config")
PP = "pipeline_model_parallel_size"


def _noop_numbers(value: Any) -> Optional[list[int]]:
    """"5,95" / [5, 95] / 5 -> [5, 95]; None when it is not a list of whole numbers."""
    items = str(value).split(",") if isinstance(value, (str, int)) else value
    try:
        numbers = [int(str(item).strip()) for item in items]
    except (TypeError, ValueError):
        return None
    return numbers if numbers and all(n >= 1 for n in numbers) else None


def stage_counts_from_noop(padded: int, pp: int, noop: list[int]) -> tuple[list[int], str]:
    """Real layers per stage of a model padded to `padded` layers over `pp` stages with empty
    layers `noop` (1-based), and why that is no uneven split ("" when it is one)."""
    if padded % pp:
        return [], f"{pp} stages do not split the {padded} layers (empty ones included) evenly"
    per = padded // pp
    counts = [per] * pp
    for n in noop:
        if n > padded:
            return [], f"empty layer {n} is past the {padded} layers"
        counts[(n - 1) // per] -= 1
    inner = [s for s in range(1, pp - 1) if counts[s] != per]
    if inner:
        return counts, (f"stage(s) {inner} between the first and the last hold empty layers; "
                        f"an uneven pipeline gives only the first and last stage counts of "
                        f"their own")
    return counts, ""


def translate_noop_layers(data: dict, problems: list[Problem]) -> dict:
    """Each section's noop_layers (and the padded num_layers beside it) -> the first / last
    stage's own layer counts; refused where they do not read as one, naming the fix."""
    model = data.get("model") if isinstance(data.get("model"), Mapping) else {}
    shared = data.get("megatron_training") or {}
    for section in SECTIONS:
        values = data.get(section)
        if not isinstance(values, Mapping) or "noop_layers" not in values:
            continue
        values = dict(values)
        raw, padded = values.pop("noop_layers"), values.pop("num_layers", None)
        key = f"{section}.noop_layers"
        noop = _noop_numbers(raw)
        real = model.get("num_layers")
        pp = values.get(PP, shared.get(PP, 1))
        fix = ("set decoder_first_pipeline_num_layers / decoder_last_pipeline_num_layers "
               "(the first and last stage's real layers) instead")
        if noop is None:
            problems.append(Problem(key, "is not a list of layer numbers (1-based, as \"5,95\")",
                                    fix, raw, STRUCTURE))
            continue
        if not isinstance(real, int) or not isinstance(pp, int) or pp < 2:
            problems.append(Problem(key, f"pads the model for a pipeline, and "
                                    f"{section}.{PP} is {pp}", "remove it", raw, STRUCTURE))
            continue
        padded = real + len(noop) if padded is None else padded
        if padded != real + len(noop):
            problems.append(Problem(f"{section}.num_layers", f"is the padded layer count, and "
                                    f"the model's {real} layers with {len(noop)} empty ones make "
                                    f"{real + len(noop)}", f"set it to {real + len(noop)} or "
                                    f"remove it", padded, STRUCTURE))
            continue
        counts, why = stage_counts_from_noop(padded, pp, noop)
        if why:
            problems.append(Problem(key, why, fix, raw, STRUCTURE))
            continue
        per = padded // pp
        for name, count in (("decoder_first_pipeline_num_layers", counts[0]),
                            ("decoder_last_pipeline_num_layers", counts[-1])):
            if count == per:
                continue
            if values.get(name) not in (None, count):
                problems.append(Problem(f"{section}.{name}", f"is {values[name]}, and "
                                        f"{key} leaves {count} there", "keep one of them",
                                        values[name], STRUCTURE))
            values[name] = count
        data = {**data, section: values}
    return data
