"""TransformerConfig values megatron-core needs on CPU: initialise weights on the host, no
CUDA-only fused kernels, no CUDA stream sync around pipeline sends."""

MEGATRON_CPU_CONFIG = {
    "use_cpu_initialization": True,
    "bias_activation_fusion": False,
    "bias_dropout_fusion": False,
    "batch_p2p_sync": False,
}
# What the accelerators use (the fused kernels exist there as CUDA / Ascend fusions).
MEGATRON_DEVICE_CONFIG = {
    "use_cpu_initialization": False,
    "bias_activation_fusion": True,
    "bias_dropout_fusion": True,
    "batch_p2p_sync": True,
}
