"""What each device kind's vLLM build can do, as a torch-free table: config/ checks a recipe
against it before anything starts, and the build objects (vllm_build.py, cpu/vllm_build.py)
act on it, so the check and the engine never disagree.

- expert_parallel: ``enable_expert_parallel`` runs (each engine's experts split whole over its
  infer-TP ranks). vLLM's CPU MoE kernel never receives the expert map and crashes with it
  (docs/platforms.md#qwen3-and-qwen3-moe-probes); the CUDA build and vllm-ascend run it.
- returns_routes: vLLM itself returns each sample's MoE routes
  (``enable_return_routed_experts``, ``CompletionOutput.routed_experts``), which vLLM 0.32
  wires only into its Model Runner V2 on in-tree platforms (CUDA, with Triton). Elsewhere
  MindRL captures them inside the engine's workers (engines/vllm_routes.py): the CPU build
  and vllm-ascend, whose own model runner does not deliver them.
- graphs: the engine replays captured graphs unless ``enforce_eager`` (CUDA graphs, Ascend's
  graph mode); a replay runs no Python, so routes captured in the workers need eager there.
  vLLM's CPU build runs eager whatever the recipe says.

CUDA and Ascend entries are written to vLLM's and vllm-ascend's APIs; only the CPU entry has
run here (docs/platforms.md says what ran where).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VLLMAbilities:
    expert_parallel: bool
    returns_routes: bool
    graphs: bool


ABILITIES = {
    "cpu": VLLMAbilities(expert_parallel=False, returns_routes=False, graphs=False),
    "cuda": VLLMAbilities(expert_parallel=True, returns_routes=True, graphs=True),
    "npu": VLLMAbilities(expert_parallel=True, returns_routes=False, graphs=True),
}


def abilities(kind: str) -> VLLMAbilities:
    """The vLLM build of device kind `kind` (npu / cuda / cpu)."""
    return ABILITIES[kind]
