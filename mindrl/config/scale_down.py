"""A cluster recipe in miniature: `+scale_down=D` runs it on CPU slots with the tiny model.

Every device count and every tensor-parallel size (training and inference) is divided by D, so
pipeline stages, data-parallel replicas and the number of rollout engines stay as the recipe
has them; the devices become logical CPU slots. A pipeline deeper than the tiny model has
layers (grpo_qwen3_235b_a22b's 16 stages) becomes the deepest the tiny layers split into
evenly, on as many times fewer devices, so data and expert parallelism still stay; an uneven
split's first / last stage counts (the recipe model's) are dropped. A tensor-parallel size of 1
cannot be divided and stays 1: those engines (or model replicas) then shrink in number, D-fold,
with the devices (grpo_qwen3_8b's 16 engines of TP1 become 8 at D=2), while the ratios of the
divided sizes stay. The model becomes the tiny one of the recipe model's family
(names.TINY_MODELS, read from the family registration: tiny-qwen2 for Qwen2 and Llama,
tiny-qwen3 for Qwen3, tiny-qwen3-moe for Qwen3-MoE; a family without one is refused, never run
as another's) and the data the generated arithmetic task (made on first use, as the embedded
default does), with lengths to match; a vision-language recipe's become tiny-qwen25vl and
grpo_tiny_vl_cpu's image task (validated on its held-out images when the recipe validates).
An agent recipe (agent_config.tools or agent_config.environment) keeps its tools or
environment, turns, verifiers and sandbox mode on the tiny model with the char_tools tokenizer
(models `<tiny>-tools-hf` / `-mcore`, never the plain char ones): its tool format becomes char
(the tiny tokenizer has the tool markers, not Qwen's tokens; an empty call asks the first tool
about the prompt's "a+b"), the episode 48 tokens with tool answers cut at 16, one tool worker,
and search ranks the shipped tiny corpus (examples/data/sample/tiny_search_corpus.jsonl); each
change logged.
A distillation recipe's teacher (teacher_config) shrinks as the other roles do (its devices,
TP, pipeline, token budget) and becomes the tiny model of its own family over the student's
tokenizer, at `<tiny>-teacher-mcore`: random-init from another seed on first use, so it shares
the student's vocabulary and is never the student's checkpoint.
DAPO's overlong buffer keeps
its share of the response limit (at least one token). Every flag stays as the recipe sets it
(sequence parallel, colocation, offload, KL loss, verifiers, micro batch sizes, samples per
prompt, updates per step); a micro-batch token budget keeps its count of longest samples. The
step takes the fewest prompts that still give every actor DP rank a full micro batch in each
mini batch and pass the recipe's batch checks (every engine a prompt): a miniature proves the
layout and the flags, and 512 prompts of a tiny model prove nothing more than 8 do. Precision
becomes fp32, the CPU platform's. Training expert parallelism stays (the tiny MoE's 8 experts
split as the recipe splits them). An expert TP below the TP (whole experts over the TP x EP
ranks, MindSpeed-RL's moe_tp_extend_ep) is divided like a TP (1 stays 1) and the EP shrinks
with the TP, so EP x expert TP / TP (MindSpeed-RL's own EP: the experts' split over the DP
ranks) stays; at a miniature's TP 1 the experts are then whole over EP ranks (their split
over TP ranks is proven at TP 2 on 2 processes by tests/engines/test_megatron_engine_etp.py
and tests/weight_sync/test_etp_sync.py). vLLM's expert parallelism becomes 1 (vLLM's CPU MoE
kernel crashes with it), logged.

This is how the shipped multi-device recipes are proven on a CPU box (tests/config and
tests/trainer run them this way), and how a user tries a recipe's topology before renting it.
"""

from __future__ import annotations

import logging
from typing import Any

from omegaconf import DictConfig, OmegaConf

from mindrl.config import names
from mindrl.config.errors import STRUCTURE, ConfigError, Problem
from mindrl.config.model_spec import VisionSpec

logger = logging.getLogger(__name__)
WORK = "${mindrl.work_dir:}"
TINY_REWARD_MODEL = "tiny-qwen2"     # a reward role's miniature, whatever the family
ROLE_SECTIONS = ("megatron_training", "actor_config", "ref_config", "reward_config",
                 "teacher_config")
ROLES = ("actor", "ref", "reward", "teacher")       # ROLE_SECTIONS[1:]'s roles
PP_KEY = "pipeline_model_parallel_size"
TP_KEY, EP_KEY = "tensor_model_parallel_size", "expert_model_parallel_size"
ETP_KEY = "expert_tensor_parallel_size"
SPLIT_KEYS = ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers")
RESOURCES = ("actor_resource", "reference_resource", "reward_resource", "teacher_resource")
DEVICE_KEYS = ("num_npus", "num_gpus", "num_cpus")

# The tiny task's lengths: prompts "a+b=" of a char tokenizer, one-digit answers.
LENGTHS = {("megatron_training", "seq_length"): 64,
           ("rl_config", "max_prompt_length"): 24,
           ("generate_config", "max_model_len"): 64,
           ("generate_config", "max_num_batched_tokens"): 4096,
           ("generate_config", "kv_cache_memory_bytes"): 64 * 2**20}
MAX_TOKENS = 8
# The tiny image task (grpo_tiny_vl_cpu's, the same files): a ~60-token question about one
# 56 x 56 image (4 image tokens), one-digit answers; validation on held-out images.
VL_TASK = {"tokenizer": "char", "task": "vl", "vl_question": "colour", "image_size": 56,
           "num_prompts": 1024, "num_val_prompts": 64}
VL_DATA = f"{WORK}/data/vl_colour_56px"
VL_LENGTHS = {**LENGTHS, ("megatron_training", "seq_length"): 128,
              ("rl_config", "max_prompt_length"): 96, ("generate_config", "max_model_len"): 128}
# An agent recipe's episode holds a call, the tool's answer and what follows in one budget
# (grpo_tiny_agent_cpu's 48 tokens): max_tool_response_tokens must stay below it.
AGENT_MAX_TOKENS, AGENT_TOOL_TOKENS = 48, 16
AGENT_LENGTHS = {**LENGTHS, ("megatron_training", "seq_length"): 80,
                 ("generate_config", "max_model_len"): 80}
# The search tool's corpus in miniature: the sums the arith task asks ("1+2=3: one plus two is
# three"), shipped, so the miniature's searches for "1+2" find something.
TINY_SEARCH_CORPUS = "${mindrl.repo_dir:}/examples/data/sample/tiny_search_corpus.jsonl"


def _divide(value: Any, divisor: int, key: str, problems: list) -> Any:
    """value / divisor; a tensor-parallel size of 1 stays 1 (see the module docstring)."""
    if value == 1 and key.endswith("_parallel_size"):
        return value
    if not isinstance(value, int) or value % divisor:
        problems.append(Problem(key, f"cannot be divided by scale_down={divisor}",
                                "pick a scale_down that divides every TP size and device count "
                                "of the recipe", value, STRUCTURE))
        return value
    return value // divisor


def scale_down(raw: Any) -> Any:
    """The recipe with `scale_down` applied (see the module docstring); unchanged without it."""
    if not isinstance(raw, DictConfig) or raw.get("scale_down") is None:
        return raw
    divisor = raw.get("scale_down")
    if not isinstance(divisor, int) or isinstance(divisor, bool) or divisor < 1:
        raise ConfigError([Problem("scale_down", "must be a whole number >= 1", "e.g. "
                                   "+scale_down=2 halves every device count and TP size",
                                   divisor, STRUCTURE)])
    data = OmegaConf.to_container(raw, resolve=False)
    problems: list[Problem] = []
    _shrink_expert_parallel(data, divisor, problems)
    for section in ROLE_SECTIONS:
        values = data.get(section) or {}
        if "tensor_model_parallel_size" in values:
            values["tensor_model_parallel_size"] = _divide(
                values["tensor_model_parallel_size"], divisor,
                f"{section}.tensor_model_parallel_size", problems)
        for key in ("bf16", "fp16"):
            if key in values:
                values[key] = False
        if section == "reward_config" and values.get("load"):
            values["load"] = f"{WORK}/models/{TINY_REWARD_MODEL}-reward-mcore"
    rl = data.setdefault("rl_config", {})
    for name in RESOURCES:
        resource = rl.get(name)
        if not resource:
            continue
        counts = {k: v for k, v in resource.items() if k in DEVICE_KEYS}
        if len(counts) == 1:
            (kind, count), = counts.items()
            rl[name] = {"num_cpus": _divide(count, divisor, f"rl_config.{name}.{kind}",
                                            problems)}
    gen = data.setdefault("generate_config", {})
    gen["infer_tensor_parallel_size"] = _divide(gen.get("infer_tensor_parallel_size", 1),
                                                divisor, "generate_config."
                                                "infer_tensor_parallel_size", problems)
    if gen.get("infer_expert_parallel_size", 1) != 1 or gen.get("enable_expert_parallel"):
        logger.warning("scale_down: vLLM expert parallelism (infer_expert_parallel_size %s) "
                       "becomes 1 on CPU slots: the experts split over infer TP; training "
                       "expert parallelism stays as the recipe sets it",
                       gen.get("infer_expert_parallel_size", 1))
        gen["infer_expert_parallel_size"], gen["enable_expert_parallel"] = 1, False
    if gen.get("rollout_devices"):
        gen["rollout_devices"] = _divide(gen["rollout_devices"], divisor,
                                         "generate_config.rollout_devices", problems)
    model = data.get("model") or {}
    vision = bool(model.get("vision"))
    tiny = _tiny_model(model, vision, problems)
    if problems:
        raise ConfigError(problems)
    agent = data.get("agent_config") or {}
    agentic = bool(agent.get("tools") or agent.get("environment"))    # multi-turn episodes

    data["model"] = OmegaConf.to_container(OmegaConf.load(_model_file(tiny)))
    data["prepare"] = {"tiny_model": tiny, **VL_TASK} if vision else {
        "tiny_model": tiny, "tokenizer": "char_tools" if agentic else "char", "task": "arith",
        "num_prompts": 4096, "max_operand": 3, "holdout_pairs": 0}
    # The tool markers' tokenizer is another model: its own folders (grpo_tiny_agent_cpu's
    # names), so a plain char miniature never loads it, nor this one the plain char model.
    models = f"{WORK}/models/{tiny}-tools" if agentic else f"{WORK}/models/{tiny}"
    shared = data.setdefault("megatron_training", {})
    shared.update(model=tiny, tokenizer_name_or_path=f"{models}-hf",
                  data_path=f"{VL_DATA}/train" if vision
                  else f"{WORK}/data/arith_0to3_holdout0/train.jsonl",
                  load=f"{models}-mcore")
    for section in ("actor_config", "ref_config"):
        if (data.get(section) or {}).get("load"):
            data[section]["load"] = f"{models}-mcore"
    _scale_teacher(data, tiny, "-tools" if agentic else "", model.get("vocab_size"), problems)
    if problems:
        raise ConfigError(problems)
    _shorten_pipelines(data, data["model"]["num_layers"])
    longest = _longest(data)
    lengths = VL_LENGTHS if vision else AGENT_LENGTHS if agentic else LENGTHS
    for (section, key), value in lengths.items():
        data.setdefault(section, {})[key] = value
    for section in ROLE_SECTIONS[1:]:
        (data.get(section) or {}).pop("tokenizer_name_or_path", None)
    if vision and rl.get("val_data_path"):
        rl["val_data_path"] = f"{VL_DATA}/test"     # held-out images, as the recipe validates
    else:
        rl.pop("val_data_path", None)
    gen["dtype"] = "float32"
    sampling = gen.setdefault("sampling_config", {})
    recipe_max_tokens = sampling.get("max_tokens")
    budget = AGENT_MAX_TOKENS if agentic else MAX_TOKENS
    sampling["max_tokens"] = min(sampling.get("max_tokens", budget), budget)
    _scale_overlong(rl, recipe_max_tokens, sampling["max_tokens"])
    sampling["min_tokens"] = min(sampling.get("min_tokens", 0), budget)
    if agentic:
        _scale_agent(data["agent_config"])
    _scale_token_budgets(data, longest, _longest(data))
    del data["scale_down"]
    _fewest_prompts(data)
    rl = data["rl_config"]        # _fewest_prompts may have replaced it
    if rl.get("filter_groups_train_batch_size") is not None:   # MindSpeed-RL's copy of it
        rl["filter_groups_train_batch_size"] = data["megatron_training"]["global_batch_size"]
    return OmegaConf.create(data)


def _scale_agent(agent: dict) -> None:
    """An agent recipe's tools on the tiny model (see the module docstring), each change
    logged: the char format (the char tokenizer has none of Qwen's tool tokens), a tool answer
    that fits the tiny episode, one tool worker, and the shipped tiny corpus for search."""
    from mindrl.config.schema import AgentConfig

    changes = []
    if agent.get("format", AgentConfig.format) != "char":
        changes.append(f"agent_config.format {agent.get('format', AgentConfig.format)} becomes "
                       f"char (the tiny char_tools tokenizer has the tool markers, not Qwen's "
                       f"tokens)")
        agent["format"] = "char"
    answer = agent.get("max_tool_response_tokens", AgentConfig.max_tool_response_tokens)
    if not isinstance(answer, int) or answer > AGENT_TOOL_TOKENS:
        changes.append(f"agent_config.max_tool_response_tokens {answer} becomes "
                       f"{AGENT_TOOL_TOKENS} (a call and its answer fit the episode's "
                       f"{AGENT_MAX_TOKENS} tokens)")
        agent["max_tool_response_tokens"] = AGENT_TOOL_TOKENS
    workers = agent.get("tool_workers", AgentConfig.tool_workers)
    if workers != 1:
        changes.append(f"agent_config.tool_workers {workers} becomes 1 (a handful of calls)")
        agent["tool_workers"] = 1
    if "search" in agent.get("tools", []) or agent.get("search_corpus"):
        changes.append(f"agent_config.search_corpus {agent.get('search_corpus')} becomes the "
                       f"shipped tiny corpus (examples/data/sample/tiny_search_corpus.jsonl)")
        agent["search_corpus"] = TINY_SEARCH_CORPUS
    for change in changes:
        logger.warning("scale_down: %s", change)


def _scale_teacher(data: dict, tiny: str, suffix: str, vocab: Any, problems: list) -> None:
    """A distillation recipe's teacher in miniature: the tiny model of the teacher model's own
    family (the student's tiny when teacher_config names none), over the student's tokenizer
    (prepare.tokenizer), so both share one vocabulary; its `load` becomes
    `<teacher tiny><suffix>-teacher-mcore`, made on first use by trainer/prepare.py from
    another seed than the student's: a teacher that differs, never the student's start. A
    teacher whose vocabulary is not the recipe student's (`vocab`) is refused here: the tiny
    pair would share one and hide it."""
    teacher = data.get("teacher_config")
    if not (data.get("rl_config") or {}).get("distill_loss") or not isinstance(teacher, dict):
        return
    name = teacher.get("model")
    if isinstance(name, str) and _model_file(name).is_file():
        model = OmegaConf.to_container(OmegaConf.load(_model_file(name)))
        if model.get("vocab_size") != vocab:
            problems.append(Problem("teacher_config.model", f"has a vocabulary of "
                                    f"{model.get('vocab_size')} tokens, the student's model "
                                    f"{vocab}: the teacher scores the student's token ids",
                                    "pick a teacher trained with the student's tokenizer",
                                    name, STRUCTURE))
            return
        name = _tiny_model(model, bool(model.get("vision")), problems)
    else:
        name = tiny                   # megatron_training's model (or an interpolation of it)
    teacher["model"] = name
    if teacher.get("load"):
        teacher["load"] = f"{WORK}/models/{name}{suffix}-teacher-mcore"


def _tiny_model(model: dict, vision: bool, problems: list) -> Any:
    """The tiny model of the recipe model's family (names.TINY_MODELS): a vision-language
    model's by its vision.family, a decoder's by its architecture. A family without one is
    refused naming those that have one: another family's miniature would prove nothing."""
    if vision:
        key, known = "model.vision.family", names.VISION_FAMILIES
        family = (model["vision"].get("family", VisionSpec.family)
                  if isinstance(model["vision"], dict) else None)
    else:
        key, known, family = "model.architecture", names.ARCHITECTURES, model.get("architecture")
    have = [name for name in known if name in names.TINY_MODELS]
    if family in have:
        return names.TINY_MODELS[family]
    problems.append(Problem(key, "is not a registered model family with a tiny model "
                            "(+scale_down runs a recipe on its family's)",
                            f"use one of {', '.join(have)}, or register the family with its "
                            "tiny model (mindrl/config/names.py FAMILIES)", family, STRUCTURE))
    return None


def _shrink_expert_parallel(data: dict, divisor: int, problems: list) -> None:
    """Expert TP below the TP keeps its meaning (see the module docstring): expert TP divided
    as a TP is, and EP x expert TP / TP kept, in each section that sets any of the three (a
    role that sets none inherits megatron_training's). Logged; runs before the TPs divide."""
    shared = data.get("megatron_training") or {}
    for section in ROLE_SECTIONS:
        values = data.get(section) or {}
        if section != ROLE_SECTIONS[0] and not {TP_KEY, EP_KEY, ETP_KEY} & set(values):
            continue
        tp = values.get(TP_KEY, shared.get(TP_KEY, 1))
        ep = values.get(EP_KEY, shared.get(EP_KEY, 1))
        etp = values.get(ETP_KEY, shared.get(ETP_KEY))
        if not all(isinstance(v, int) for v in (tp, ep, etp)) or etp >= tp:
            continue
        if tp % divisor:
            continue                      # the TP's own division names the problem
        new_tp, new_etp = tp // divisor, _divide(etp, divisor, f"{section}.{ETP_KEY}", problems)
        if problems:
            return
        new_ep, rest = divmod(ep * etp * new_tp, tp * new_etp)
        if rest or new_ep < 1:
            problems.append(Problem(f"{section}.{EP_KEY}", f"cannot keep its experts' split "
                                    f"over the DP ranks at scale_down={divisor} (TP {tp} -> "
                                    f"{new_tp}, expert TP {etp} -> {new_etp})", "pick a "
                                    "scale_down that divides EP x expert TP", ep, STRUCTURE))
            return
        if ETP_KEY in values:
            values[ETP_KEY] = new_etp
        if new_ep != ep:
            values[EP_KEY] = new_ep
            logger.warning("scale_down: %s's expert parallelism %d becomes %d with its TP %d "
                           "-> %d (expert TP %d: the experts' split over the DP ranks stays)",
                           section, ep, new_ep, tp, new_tp, new_etp)


def _deepest(pp: int, layers: int) -> int:
    """The most stages, at most pp and dividing it, that `layers` split into evenly."""
    return max(d for d in range(1, min(pp, layers) + 1) if pp % d == 0 and layers % d == 0)


def _shorten_pipelines(data: dict, tiny_layers: int) -> None:
    """A pipeline deeper than the tiny model allows (Qwen3-235B-A22B's 16 stages, 2 layers)
    becomes the deepest the tiny layers split into evenly, and the role's devices shrink by
    the same factor, so its data parallelism (and expert parallelism inside it) stays. An
    uneven split's first / last stage counts are the recipe model's: dropped. Both logged."""
    shared = data.get("megatron_training") or {}
    factors = {}
    for role, section in zip(ROLES, ROLE_SECTIONS[1:]):
        pp = (data.get(section) or {}).get(PP_KEY, shared.get(PP_KEY, 1))
        depth = _deepest(pp, tiny_layers) if isinstance(pp, int) and pp >= 1 else pp
        if depth != pp:
            factors[role] = pp // depth
            logger.warning("scale_down: the %s's pipeline of %d stages becomes %d (the tiny "
                           "model has %d layers), on %d times fewer devices: its DP and EP "
                           "stay", role, pp, depth, tiny_layers, factors[role])
    for section in ROLE_SECTIONS:
        values = data.get(section) or {}
        dropped = [key for key in SPLIT_KEYS if values.pop(key, None) is not None]
        if dropped:
            logger.warning("scale_down: %s.%s dropped (the recipe model's uneven pipeline; "
                           "the tiny model's layers split evenly)", section, "/".join(dropped))
        pp = values.get(PP_KEY)
        if isinstance(pp, int) and pp >= 1:
            values[PP_KEY] = _deepest(pp, tiny_layers)
    rl, problems = data.get("rl_config") or {}, []
    for role, name in zip(ROLES, RESOURCES):
        resource = rl.get(name)
        if role in factors and resource and "num_cpus" in resource:
            resource["num_cpus"] = _divide(resource["num_cpus"], factors[role],
                                           f"rl_config.{name}.num_cpus", problems)
    if problems:
        raise ConfigError(problems)


def _scale_overlong(rl: dict, recipe_max_tokens: Any, max_tokens: int) -> None:
    """DAPO's response limit copy follows max_tokens; the overlong buffer (MindRL's name or
    MindSpeed-RL's) keeps its share of it, at least one token."""
    if rl.get("rollout_max_tokens") is not None:
        rl["rollout_max_tokens"] = max_tokens
    for key in ("overlong_buffer_len", "overlong_buffer"):
        buffer = rl.get(key)
        if isinstance(buffer, int) and buffer > 0 and isinstance(recipe_max_tokens, int):
            rl[key] = max(1, buffer * max_tokens // recipe_max_tokens)


def _fewest_prompts(data: dict) -> None:
    """Prompts per mini batch cut to the fewest (a divisor of the recipe's) with which every
    actor DP rank gets a full micro batch and the batch checks pass; prompts per step keep the
    recipe's count of updates. Left as they are where the recipe does not parse: validation
    then names what is wrong."""
    from mindrl.config.checks.batch import check_batches, divisors
    from mindrl.config.parse import parse
    from mindrl.config.placement import data_parallel_size

    try:
        run = parse(OmegaConf.create(data))
    except ConfigError:
        return
    mt, rl = run.megatron_training, run.rl_config
    if rl.mini_batch_size < 1 or mt.global_batch_size % rl.mini_batch_size:
        return
    updates = mt.global_batch_size // rl.mini_batch_size
    full_micro = data_parallel_size(run, "actor") * run.actor_config.micro_batch_size
    for prompts in divisors(rl.mini_batch_size):
        if prompts * rl.n_samples_per_prompt < full_micro:
            continue
        candidate = {**data, "megatron_training": {**data["megatron_training"],
                                                   "global_batch_size": prompts * updates},
                     "rl_config": {**data["rl_config"], "mini_batch_size": prompts}}
        if not check_batches(parse(OmegaConf.create(candidate))):
            data.update(candidate)
            return


def _longest(data: dict) -> int:
    """max_prompt_length + max_tokens of a recipe (the schema's defaults where unset)."""
    from mindrl.config.schema import RLConfig, SamplingConfig

    sampling = (data.get("generate_config") or {}).get("sampling_config") or {}
    return (int((data.get("rl_config") or {}).get("max_prompt_length",
                                                   RLConfig.max_prompt_length))
            + int(sampling.get("max_tokens", SamplingConfig.max_tokens)))


def _scale_token_budgets(data: dict, longest: int, tiny_longest: int) -> None:
    """A token budget keeps the recipe's longest samples per micro batch at the tiny lengths."""
    for section in ROLE_SECTIONS:
        values = data.get(section) or {}
        budget = values.get("max_tokens_per_micro_batch")
        if isinstance(budget, int):
            values["max_tokens_per_micro_batch"] = max(1, budget // longest) * tiny_longest


def _model_file(name: str):
    from mindrl.paths import config_dir

    return config_dir() / "model" / f"{name}.yaml"


def with_cpu_slots(cluster, run):
    """A CPU cluster with as many logical slots per node as `run` needs (a scaled-down recipe
    runs its devices as logical CPU slots, several per core); other clusters unchanged."""
    import dataclasses

    from mindrl.config.placement import devices_required

    if cluster.device_type != "cpu" or cluster.nodes:   # a Ray cluster's slots are its own
        return cluster
    per_node = -(-devices_required(run) // cluster.num_nodes)
    return dataclasses.replace(cluster, num_devices=max(cluster.num_devices, per_node))
