"""Convert checkpoints between HF (safetensors) and Megatron-core (torch_dist), MindSpeed-style.

    python cli/convert_ckpt.py --use-mcore-models --model-type GPT \\
        --load-model-type hf --save-model-type mg \\
        --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2 --add-qkv-bias \\
        --load-dir ./model_from_hf/qwen25_hf --save-dir ./model_weights/qwen25_mcore \\
        --tokenizer-model ./model_from_hf/qwen25_hf/tokenizer.json \\
        --model-type-hf llama2 --params-dtype bf16

The Megatron output is one dist checkpoint that loads at any TP/PP (the target sizes are
checked and recorded): convert once for both the actor and the reference layouts.
Qwen3-MoE: --model-type-hf qwen3-moe (or qwen3_moe); experts saved per expert
(save_pretrained) or stacked (a loaded model's state dict) both convert; written back per
expert. --target-expert-parallel-size is checked against the expert count.
Qwen2.5-VL (Qwen2_5_VLForConditionalGeneration): --model-type-hf qwen2_5_vl --add-qkv-bias;
the vision tower travels as is, the processor files with the tokenizer. A folder without them
(a bare save_pretrained of the model) converts weights and config with a note; a
--tokenizer-model folder holding tokenizer and processor files adds both.
"""

import argparse
import importlib.util
import os
import sys
import time
import warnings
from pathlib import Path

# The converter moves bytes: gloo on CPU even on accelerator hosts, no hub access.
os.environ.setdefault("MINDRL_DEVICE", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

if importlib.util.find_spec("mindrl") is None:  # a checkout that is not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def build_parser() -> argparse.ArgumentParser:
    from mindrl.ckpt.convert_checks import MODEL_TYPE_HF, PARAMS_DTYPES

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--use-mcore-models", action="store_true",
                   help="required: only Megatron-core GPT models are supported")
    p.add_argument("--model-type", default="GPT", help="Megatron model type (GPT only)")
    p.add_argument("--load-model-type", required=True, choices=["hf", "mg"])
    p.add_argument("--save-model-type", required=True, choices=["hf", "mg"])
    p.add_argument("--target-tensor-parallel-size", type=int, default=1,
                   help="TP the Megatron checkpoint must support (checked, recorded)")
    p.add_argument("--target-pipeline-parallel-size", type=int, default=1,
                   help="PP the Megatron checkpoint must support (checked, recorded)")
    p.add_argument("--decoder-first-pipeline-num-layers", type=int, default=None,
                   help="uneven pipeline: the first stage's layer count, the rest split "
                        "evenly (with --target-pipeline-parallel-size; checked, recorded)")
    p.add_argument("--decoder-last-pipeline-num-layers", type=int, default=None,
                   help="uneven pipeline: the last stage's layer count (checked, recorded)")
    p.add_argument("--target-expert-parallel-size", type=int, default=1,
                   help="EP the Megatron checkpoint must support: a MoE model's experts "
                        "divide by it (checked, recorded)")
    p.add_argument("--model", default=None,
                   help="a configs/model name (e.g. qwen3-30b-a3b): the checkpoint must have "
                        "that shape (experts, top-k, widths ...), checked before any work")
    p.add_argument("--add-qkv-bias", action="store_true",
                   help="the model has q/k/v biases (Qwen2); must agree with the weights")
    p.add_argument("--load-dir", required=True, type=Path)
    p.add_argument("--save-dir", required=True, type=Path)
    p.add_argument("--tokenizer-model", default=None,
                   help="tokenizer.json or its folder (default: the one in --load-dir); for "
                        "a VL model, a folder with processor files gives those too")
    p.add_argument("--model-type-hf", default=None, choices=list(MODEL_TYPE_HF),
                   help="HF family; must agree with config.json (llama2 also covers Qwen2 "
                        "with --add-qkv-bias, as in MindSpeed's guide; qwen2_5_vl: "
                        "Qwen2.5-VL, vision tower included)")
    p.add_argument("--params-dtype", default=None, choices=list(PARAMS_DTYPES),
                   help="dtype of the written weights (default: keep the source dtype)")
    p.add_argument("--make-vocab-size-divisible-by", type=int, default=None,
                   help="Megatron vocab padding recorded with the checkpoint (hf -> mg; "
                        "default 1: loading pads to any TP anyway)")
    p.add_argument("--max-shard-size", default=None,
                   help="safetensors shard size (mg -> hf; default 5GB)")
    p.add_argument("--ckpt-format", default="torch_dist", choices=["torch_dist"],
                   help="Megatron checkpoint format (dist checkpoint, any TP/PP)")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty --save-dir")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def check_flags(args) -> None:
    """Flag combinations the converter cannot honour; raises ConversionError."""
    from mindrl.ckpt.convert_checks import ConversionError

    if not args.use_mcore_models:
        raise ConversionError("only Megatron-core models are supported: add --use-mcore-models")
    if args.model_type != "GPT":
        raise ConversionError(f"--model-type {args.model_type}: only GPT is supported")
    if args.load_model_type == args.save_model_type:
        raise ConversionError(
            f"--load-model-type and --save-model-type are both {args.load_model_type}: "
            f"nothing to convert (a Megatron torch_dist checkpoint already loads at any TP/PP)")
    if args.save_model_type == "mg" and args.max_shard_size is not None:
        raise ConversionError("--max-shard-size applies to HF output (--save-model-type hf)")
    if args.save_model_type == "hf" and args.target_expert_parallel_size != 1:
        raise ConversionError("HF output is one unsharded model: use "
                              "--target-expert-parallel-size 1 (or leave it out)")
    uneven = (args.decoder_first_pipeline_num_layers, args.decoder_last_pipeline_num_layers)
    if args.save_model_type == "hf" and uneven != (None, None):
        raise ConversionError("HF output is one unsharded model: leave out "
                              "--decoder-first/last-pipeline-num-layers")
    if args.save_model_type == "hf" and args.make_vocab_size_divisible_by is not None:
        raise ConversionError("--make-vocab-size-divisible-by applies to Megatron output "
                              "(--save-model-type mg)")


def _uneven_stages(plan) -> str:
    """" (layers per stage 5, 6, ..., 5)" for an uneven pipeline, else ""."""
    from mindrl.config.pipeline_stages import stage_layer_counts

    if (plan.first_stage_layers, plan.last_stage_layers) == (None, None):
        return ""
    counts = stage_layer_counts(plan.spec.num_layers, plan.pp, plan.first_stage_layers,
                                plan.last_stage_layers)
    return f" (layers per stage {', '.join(map(str, counts))})"


def main(argv=None) -> int:
    for category in (UserWarning, FutureWarning):  # Apex/TE fallbacks, DCP API renames
        warnings.filterwarnings("ignore", category=category, module=r"megatron\..*")
    parser = build_parser()
    args = parser.parse_args(argv)

    from mindrl.ckpt import converter

    start = time.perf_counter()
    try:
        check_flags(args)
        if args.save_model_type == "mg":
            plan = converter.plan_hf_to_mcore(
                args.load_dir, args.save_dir, tp=args.target_tensor_parallel_size,
                pp=args.target_pipeline_parallel_size, params_dtype=args.params_dtype,
                model_type_hf=args.model_type_hf, add_qkv_bias=args.add_qkv_bias,
                tokenizer_model=args.tokenizer_model,
                make_vocab_size_divisible_by=args.make_vocab_size_divisible_by or 1,
                overwrite=args.overwrite, ep=args.target_expert_parallel_size,
                model=args.model, first_stage_layers=args.decoder_first_pipeline_num_layers,
                last_stage_layers=args.decoder_last_pipeline_num_layers)
            for note in plan.notes:
                print(f"note: {note}")
            out = converter.run_hf_to_mcore(plan, progress=not args.no_progress)
            what = (f"Megatron torch_dist checkpoint ({plan.params_dtype}), loads at any TP/PP; "
                    f"checked TP={plan.tp} PP={plan.pp}" + _uneven_stages(plan)
                    + (f" EP={plan.ep}" if plan.spec.is_moe else ""))
        else:
            plan = converter.plan_mcore_to_hf(
                args.load_dir, args.save_dir, params_dtype=args.params_dtype,
                model_type_hf=args.model_type_hf, add_qkv_bias=args.add_qkv_bias,
                tokenizer_model=args.tokenizer_model,
                max_shard_size=args.max_shard_size or "5GB",
                tp=args.target_tensor_parallel_size, pp=args.target_pipeline_parallel_size,
                overwrite=args.overwrite, model=args.model)
            for note in plan.notes:
                print(f"note: {note}")
            out = converter.run_mcore_to_hf(plan, progress=not args.no_progress)
            what = f"HF safetensors checkpoint ({plan.params_dtype})"
    except converter.ConversionError as e:
        parser.exit(2, f"error: {e}\n")
    print(f"wrote {out}: {what} in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
