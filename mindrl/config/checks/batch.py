"""Prompts, samples and mini batches that split evenly over every role's ranks and engines."""

from __future__ import annotations

from mindrl.config import names
from mindrl.config.errors import Problem
from mindrl.config.checks.packing import has_token_budget
from mindrl.config.placement import data_parallel_size, rollout_data_parallel_size
from mindrl.config.schema import RunConfig


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def check_batches(run: RunConfig) -> list[Problem]:
    """Prompts split into mini batches, each into micro batches on every DP rank."""
    out: list[Problem] = []
    mt, rl, gen = run.megatron_training, run.rl_config, run.generate_config
    gbs, n, mini = mt.global_batch_size, rl.n_samples_per_prompt, rl.mini_batch_size
    if gbs % mini:
        out.append(Problem("rl_config.mini_batch_size", f"does not divide "
                           f"megatron_training.global_batch_size={gbs} (both count prompts)",
                           f"use one of {divisors(gbs)}", mini))
        return out
    samples, mini_samples = gbs * n, mini * n
    dp = data_parallel_size(run, "actor")
    if dp and has_token_budget(run, "actor"):   # any sample count per rank: only DP divides
        if mini_samples % dp:
            out.append(Problem("rl_config.mini_batch_size", f"x n = {mini_samples} samples do "
                               f"not split over actor DP {dp}", f"make it x n a multiple of "
                               f"{dp}", mini))
    elif dp:
        micro = run.actor_config.micro_batch_size
        if mini_samples % (micro * dp):
            key = names.role_key(run, "actor", "micro_batch_size")
            out.append(Problem(key, f"x actor DP {dp} = {micro * dp} does not divide a mini "
                               f"batch of {mini} prompts x {n} samples = {mini_samples}",
                               (f"use a micro batch size in {divisors(mini_samples // dp)}"
                                if mini_samples % dp == 0 else
                                f"make rl_config.mini_batch_size x n a multiple of DP {dp}"),
                               micro))
        fwd = rl.actor_forward_micro_batch_size or micro
        if samples % (fwd * dp):
            out.append(Problem("rl_config.actor_forward_micro_batch_size", f"x actor DP {dp} "
                               f"does not divide the {samples} samples of a step",
                               "use a smaller forward micro batch", fwd))
    for role, fwd_key in (("ref", "ref_forward_micro_batch_size"), ("reward", None),
                          ("teacher", None)):
        if role not in run.active_roles:
            continue
        rdp = data_parallel_size(run, role)
        fwd = (getattr(rl, fwd_key) if fwd_key else None) or run.role(role).micro_batch_size
        if has_token_budget(run, role):
            fwd = 1                      # by tokens: the samples need only split over DP
        if rdp and samples % (fwd * rdp):
            key = (f"rl_config.{fwd_key}" if fwd_key and getattr(rl, fwd_key)
                   else names.role_key(run, role, "micro_batch_size"))
            out.append(Problem(key, f"x {role} DP {rdp} does not divide the {samples} "
                               "samples of a step", "use a smaller forward micro batch",
                               fwd))
    idp = rollout_data_parallel_size(run)
    if idp and gbs % idp:
        out.append(Problem("megatron_training.global_batch_size", f"is not a multiple of the "
                           f"{idp} vLLM instances (a prompt's samples stay on one instance)",
                           f"use a multiple of {idp}", gbs))
    sampling = gen.sampling_config
    if not 0 <= sampling.min_tokens <= sampling.max_tokens:
        out.append(Problem("generate_config.sampling_config.min_tokens",
                           f"must be between 0 and max_tokens={sampling.max_tokens}",
                           "lower min_tokens or raise max_tokens", sampling.min_tokens))
    need = rl.max_prompt_length + sampling.max_tokens
    if need > mt.seq_length:
        out.append(Problem("megatron_training.seq_length", f"is shorter than max_prompt_length "
                           f"+ max_tokens = {need}", f"set it to at least {need}",
                           mt.seq_length))
    if need > gen.max_model_len:
        out.append(Problem("generate_config.max_model_len", f"is shorter than "
                           f"max_prompt_length + max_tokens = {need}",
                           f"set it to at least {need}", gen.max_model_len))
    if mt.seq_length > run.model.max_position_embeddings:
        out.append(Problem("megatron_training.seq_length", f"exceeds {run.model.name} "
                           f"max_position_embeddings={run.model.max_position_embeddings}",
                           "shorten the sequences", mt.seq_length))
    return out
