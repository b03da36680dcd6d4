"""A platform's vLLM build as engines/ sees it: the engine's keyword arguments and the weight
loaders it offers beyond vLLM's own reload. mindrl/device.py hands out the one in use
(`device.vllm_build()`), so engines/ never asks which platform it runs on.

This class is the accelerators' build (CUDA vLLM, vllm-ascend): the config's memory fraction
and sleep mode, vLLM computing with its weights as loaded, and vLLM's ``reload_weights`` for
every load. The CPU build is platforms/cpu/vllm_build.py.
"""

from __future__ import annotations

from mindrl.platforms.vllm_abilities import VLLMAbilities, abilities


class VLLMBuild:
    # Whether this build runs with config/cpu_notice.cpu_vllm whatever the recipe says (the
    # CLI then says so once at start-up).
    overrides_recipe_settings = False

    def __init__(self, kind: str = "cuda"):
        """kind: the device kind whose build this is (npu / cuda); what it can do is
        vllm_abilities.py's entry, the table config/ checks recipes against."""
        self.abilities: VLLMAbilities = abilities(kind)

    def engine_kwargs(self, kw: dict, cfg, cpu_vllm: dict) -> dict:
        """``vllm.LLM`` keyword arguments: `kw` (from the config) and what this build adds
        from `cfg` (a GenerateConfig). `cpu_vllm`: what the CPU build runs with whatever the
        config says (config/cpu_notice.cpu_vllm; platforms import no config); unused here."""
        return {**kw, "gpu_memory_utilization": cfg.gpu_memory_utilization,
                "enable_sleep_mode": cfg.sleep_level > 0}

    def engine_segments(self) -> list:
        """Host shared-memory segments the engine's workers made and leave behind: none."""
        return []

    def release_segments(self, paths) -> None:
        """Nothing to remove on this build."""

    def step_on_this_thread(self) -> None:
        """Ready the calling thread to step the engine: nothing here (the model computes on the
        device)."""

    def use_plain_linears(self) -> None:
        """Keep linear weights as loaded (nothing to do: this build never repacks them)."""

    def load_mode(self, model, tp_size: int) -> str:
        """How weights get into `model` (vLLM's model in a worker): vLLM's reload here, since
        these builds post-process weights in ways only vLLM's loaders know."""
        return "reload"

    def load_in_place(self, model, weights) -> None:
        raise NotImplementedError("loading in place needs vLLM's CPU build with plain linears")

    def load_packed(self, model, weights, modules) -> None:
        raise NotImplementedError("packed loading needs vLLM's CPU build")

    def share_weights(self, model, path: str, view):
        raise NotImplementedError("shared weights need vLLM's CPU build with plain linears")

    def refresh_moe_layers(self, model, loaded_modules=None) -> int:
        """Re-run what an expert layer's kernel prepares after its weights were written: nothing
        here (vLLM's reload re-runs these builds' preparation itself). Returns the layers
        prepared."""
        return 0

    def expert_products(self, layer, p, q):
        """(gate p, up p, down q) of every expert of a vLLM expert layer as its kernel computes
        with them: these builds' kernels compute with the weights as loaded."""
        from mindrl.platforms.cpu.vllm_experts import loaded_expert_products

        return loaded_expert_products(layer, p, q)
