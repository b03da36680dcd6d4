"""The shipped agent recipes (ReTool with python on Qwen2.5-7B and Qwen3-8B, Search-R1 with
search on Qwen2.5-7B): at full size they validate on the node they target, with the peers'
values where MindRL has the key; `+scale_down` makes each a miniature the tiny model runs (the
char tool format and char_tools tokenizer in folders of their own, a tool answer inside the
episode's budget, the shipped tiny corpus for search), every change logged."""

from pathlib import Path

import pytest

from mindrl.config import ConfigError, load_recipe, make_plan
from mindrl.config.scale_down import AGENT_MAX_TOKENS, AGENT_TOOL_TOKENS, with_cpu_slots

AGENT_RECIPES = {"retool_qwen25_7b": ("python", "qwen25", 8, 2),
                 "retool_qwen3_8b": ("python", "qwen3", 16, 4),
                 "search_r1_qwen25_7b": ("search", "qwen25", 8, 8)}


@pytest.mark.parametrize("recipe", sorted(AGENT_RECIPES))
def test_full_size_validates_on_its_node(recipe, recipe_clusters):
    tool, fmt, devices, engines = AGENT_RECIPES[recipe]
    cluster = recipe_clusters[recipe]
    run = load_recipe(recipe, cluster=cluster, check_paths=False)
    agent = run.agent_config
    assert agent.tools == [tool] and agent.format == fmt and agent.sandbox == "strict"
    assert 0 < agent.max_tool_response_tokens < run.generate_config.sampling_config.max_tokens
    assert run.generate_config.enable_prefix_caching
    assert run.megatron_training.seq_length >= (run.rl_config.max_prompt_length
                                               + run.generate_config.sampling_config.max_tokens)
    plan = make_plan(run, cluster, [])
    assert plan["fits_cluster"] and plan["devices_required"] == devices, plan["warnings"]
    assert plan["rollout"]["instances"] == engines
    assert (tool == "search") == (agent.search_corpus is not None)


def test_the_retool_recipes_keep_the_peers_values(recipe_clusters):
    verl = load_recipe("retool_qwen25_7b", cluster=recipe_clusters["retool_qwen25_7b"])
    slime = load_recipe("retool_qwen3_8b", cluster=recipe_clusters["retool_qwen3_8b"])
    for run in (verl, slime):
        rl = run.rl_config
        assert rl.verifier_function == ["tool_boxed_acc"] and run.active_roles == ["actor"]
        assert (rl.clip_ratio_low, rl.clip_ratio_high, run.actor_config.lr) == (0.2, 0.28, 1e-6)
        assert run.agent_config.max_turns == 8 and run.agent_config.tool_timeout_s == 30
        assert (rl.max_prompt_length, run.generate_config.sampling_config.max_tokens) == \
            (2048, 16384)
    # verl: 64 prompts x 16 in 4 updates, dual clip 10, 30 samples per AIME problem
    assert (verl.megatron_training.global_batch_size, verl.rl_config.mini_batch_size,
            verl.rl_config.n_samples_per_prompt) == (64, 16, 16)
    assert verl.rl_config.clip_ratio_c == 10.0 and verl.rl_config.val_n_samples == 30
    # slime: 32 prompts x 8 in one update, weight decay 0.1, beta2 0.98, 16 samples per problem
    assert (slime.megatron_training.global_batch_size, slime.rl_config.mini_batch_size,
            slime.rl_config.n_samples_per_prompt) == (32, 32, 8)
    assert (slime.actor_config.weight_decay, slime.actor_config.adam_beta2) == (0.1, 0.98)
    assert slime.rl_config.val_n_samples == 16


def test_the_search_recipe_keeps_search_r1s_values(recipe_clusters):
    run = load_recipe("search_r1_qwen25_7b", cluster=recipe_clusters["search_r1_qwen25_7b"])
    rl = run.rl_config
    assert (run.megatron_training.global_batch_size, rl.mini_batch_size,
            rl.n_samples_per_prompt, run.megatron_training.train_iters) == (512, 256, 5, 1005)
    assert (rl.kl_coef, rl.kl_penalty, rl.use_kl_loss) == (0.001, "low_var_kl", True)
    assert run.actor_config.lr_warmup_fraction == 0.285
    assert rl.verifier_function == ["tool_answer_em"] and run.agent_config.max_turns == 3
    assert run.ref_config.tensor_model_parallel_size == 4     # beside the actor, its layout


def test_a_search_run_names_a_corpus_that_exists(recipe_clusters):
    cluster = recipe_clusters["search_r1_qwen25_7b"]
    with pytest.raises(ConfigError, match=r"agent_config\.search_corpus.*does not exist"):
        load_recipe("search_r1_qwen25_7b", ["agent_config.search_corpus=/nowhere.jsonl"],
                    cluster=cluster, check_paths=True)
    with pytest.raises(ConfigError, match=r"agent_config\.search_corpus.*is not set"):
        load_recipe("search_r1_qwen25_7b", ["agent_config.search_corpus=null"],
                    cluster=cluster, check_paths=True)


@pytest.mark.parametrize("recipe", sorted(AGENT_RECIPES))
def test_the_miniature_is_an_agent_run_the_tiny_model_can_make(recipe, cpu2, caplog,
                                                                recipe_clusters):
    tool, fmt, _, _ = AGENT_RECIPES[recipe]
    full = load_recipe(recipe, cluster=recipe_clusters[recipe])
    mini = load_recipe(recipe, ["+scale_down=4"], cluster=cpu2)
    agent = mini.agent_config
    # tools, turns, verifiers and sandbox mode stay; the format and tokenizer become the tiny
    # ones, in folders apart from the plain char model's
    assert agent.tools == [tool] and agent.max_turns == full.agent_config.max_turns
    assert agent.sandbox == "strict" and agent.call_bonus == full.agent_config.call_bonus
    assert mini.rl_config.verifier_function == full.rl_config.verifier_function
    assert agent.format == "char" and mini.prepare.tokenizer == "char_tools"
    tiny = mini.model.name
    assert mini.megatron_training.tokenizer_name_or_path.endswith(f"models/{tiny}-tools-hf")
    assert mini.actor_config.load.endswith(f"models/{tiny}-tools-mcore")
    # a call and its answer fit the episode, the episode the sequence
    sampling = mini.generate_config.sampling_config
    assert sampling.max_tokens == AGENT_MAX_TOKENS
    assert agent.max_tool_response_tokens == AGENT_TOOL_TOKENS < sampling.max_tokens
    assert mini.rl_config.max_prompt_length + sampling.max_tokens <= \
        min(mini.megatron_training.seq_length, mini.generate_config.max_model_len)
    assert agent.tool_workers == 1
    if tool == "search":
        assert Path(agent.search_corpus).is_file()
        assert agent.search_corpus.endswith("examples/data/sample/tiny_search_corpus.jsonl")
    for change in (f"agent_config.format {fmt} becomes char",
                   "agent_config.max_tool_response_tokens 512 becomes 16",
                   "agent_config.tool_workers"):
        assert change in caplog.text
    assert ("search_corpus" in caplog.text) == (tool == "search")
    plan = make_plan(mini, with_cpu_slots(cpu2, mini), [])
    assert plan["fits_cluster"], plan["warnings"]


def test_a_single_turn_miniature_keeps_the_plain_char_model(cpu2):
    mini = load_recipe("grpo_qwen25_7b", ["+scale_down=2"], cluster=cpu2)
    assert not mini.agent_config.tools and mini.prepare.tokenizer == "char"
    assert mini.megatron_training.tokenizer_name_or_path.endswith("models/tiny-qwen2-hf")
    assert mini.generate_config.sampling_config.max_tokens == 8


def test_the_tiny_corpus_answers_the_miniatures_questions():
    """The shipped corpus holds every sum of the arith task's operands 0..3, so the search a
    char-format empty call makes ("1+2", the search tool's default 3 passages) finds it."""
    from mindrl.paths import REPO_ROOT
    from mindrl.tools.search import BM25, load_corpus

    docs = load_corpus(str(REPO_ROOT / "examples/data/sample/tiny_search_corpus.jsonl"))
    assert len(docs) == len({doc_id for doc_id, _ in docs}) == 16
    top = BM25(docs).top("1+2", 3)
    assert {"sum-1-2", "sum-2-1"} <= {doc_id for doc_id, _, _ in top}
