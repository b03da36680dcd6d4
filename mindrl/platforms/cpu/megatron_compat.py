"""Megatron-core on a CPU-only torch: redirect the places where it still reaches for CUDA.

Installed by mindrl.device.prepare_megatron() only when the device is CPU. The places
(docs/platforms.md#megatron-core-on-cpu): torch.cuda.current_device(), literal device="cuda"
tensors (causal mask, optimizer scalars, grad clipping, schedule counters), the TP RNG tracker
built on CUDA RNG state, `param.type() == 'torch.cuda.FloatTensor'` assertions, and
torch.cuda.synchronize() in p2p communication.
"""

from __future__ import annotations

import contextlib

import torch
from torch.overrides import TorchFunctionMode

_installed = False
_TENSOR_TYPE = torch.Tensor.type
# Tensor.to(device, ...) takes the device positionally; new_* take sizes there.
_TO = torch.Tensor.to


def _is_cuda(device) -> bool:
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device.startswith("cuda")
    return isinstance(device, int) and not isinstance(device, bool)


class CudaToCpuMode(TorchFunctionMode):
    """Rewrites cuda / integer device arguments to cpu, makes .cuda() a no-op, and lets
    Megatron's fp32 type assertions see CPU tensors as the cuda types they check for."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.cuda:
            return args[0]
        if "device" in kwargs and _is_cuda(kwargs["device"]):
            kwargs = {**kwargs, "device": "cpu"}
        if func is _TO and len(args) > 1 and not isinstance(args[1], int) and _is_cuda(args[1]):
            args = (args[0], "cpu", *args[2:])
        if func is _TENSOR_TYPE and len(args) == 1 and not kwargs:
            name = func(*args)
            return name.replace("torch.", "torch.cuda.", 1) if ".cuda." not in name else name
        return func(*args, **kwargs)


_MODE = CudaToCpuMode()    # entered for the whole process by install()


@contextlib.contextmanager
def _mode_suspended():
    """The body runs without the process's CudaToCpuMode (when it is the innermost mode)."""
    from torch.overrides import _get_current_function_mode, _pop_mode, _push_mode

    if _get_current_function_mode() is not _MODE:
        yield
        return
    _pop_mode()
    try:
        yield
    finally:
        _push_mode(_MODE)


@contextlib.contextmanager
def _mode_resumed():
    """The body runs under the process's CudaToCpuMode (a site inside a suspended pass)."""
    from torch.overrides import _get_current_function_mode_stack, _pop_mode, _push_mode

    if _MODE in _get_current_function_mode_stack():
        yield
        return
    _push_mode(_MODE)
    try:
        yield
    finally:
        _pop_mode()


def _rebind(module_name: str, name: str, context) -> None:
    """module.name runs inside `context`, and so does every loaded megatron module that
    imported it by name (modules imported later import the wrapper)."""
    import importlib
    import sys

    module = importlib.import_module(module_name)
    original = getattr(module, name)
    if getattr(original, "__wrapped_by_mindrl__", False):
        return
    wrapper = context()(original)         # a contextmanager decorates (functools.wraps)
    wrapper.__wrapped_by_mindrl__ = True
    for loaded in list(sys.modules.values()):
        if getattr(loaded, "__name__", "").startswith("megatron.") and \
                getattr(loaded, name, None) is original:
            setattr(loaded, name, wrapper)


# Megatron's own steps of a pass (model forward with its loss, and backward), run without the
# mode; inside them, the sites that still name "cuda" literally, run under it (the rest of
# Megatron's device choices inside a pass go through torch.cuda.current_device(), a CPU device
# here). A site missed here fails loudly: torch refuses the CUDA device
# (tests/platforms/test_megatron_compat.py holds the arrangement).
_PASS_STEPS = (("megatron.core.pipeline_parallel.schedules", "forward_step"),
               ("megatron.core.pipeline_parallel.schedules", "backward_step"))
_CUDA_SITES_IN_A_PASS = (
    ("megatron.core.transformer.moe.moe_utils", "save_to_aux_losses_tracker"),
    ("megatron.core.transformer.utils", "get_default_causal_mask"),
    ("megatron.core.transformer.utils", "get_sliding_window_causal_mask"),
    ("megatron.core.models.common.embeddings.rope_utils", "get_pos_emb_on_this_cp_rank"))


def _passes_without_the_mode() -> None:
    """The mode's Python dispatch costs about 7 us on every torch call, and passes make most
    of a step's torch calls (a tenth of a tiny model's update); construction, checkpoints and
    the optimizer keep the mode (docs/platforms.md#megatron-core-on-cpu)."""
    for module_name, name in _CUDA_SITES_IN_A_PASS:
        _rebind(module_name, name, _mode_resumed)
    for module_name, name in _PASS_STEPS:
        _rebind(module_name, name, _mode_suspended)


class CpuRNGStatesTracker:
    """Megatron's named RNG streams (data-parallel / tensor-parallel / expert) on the CPU
    generator: `fork(name)` swaps the CPU RNG state in and out."""

    def __init__(self, *args, **kwargs):
        self.reset()

    def is_initialized(self):
        return self._is_initialized

    def reset(self):
        self._is_initialized = False
        self.states_ = {}
        self.seeds_ = set()

    def get_states(self):
        return dict(self.states_)

    def set_states(self, states):
        self._is_initialized = True
        self.states_ = states

    def add(self, name, seed):
        self._is_initialized = True
        if seed in self.seeds_ or name in self.states_:
            raise RuntimeError(f"RNG stream {name!r} / seed {seed} already registered")
        self.seeds_.add(seed)
        saved = torch.get_rng_state()
        torch.manual_seed(seed)
        self.states_[name] = torch.get_rng_state()
        torch.set_rng_state(saved)

    @contextlib.contextmanager
    def fork(self, name="model-parallel-rng"):
        if name not in self.states_:
            raise RuntimeError(f"RNG stream {name!r} is not registered")
        saved = torch.get_rng_state()
        torch.set_rng_state(self.states_[name])
        try:
            yield
        finally:
            self.states_[name] = torch.get_rng_state()
            torch.set_rng_state(saved)


def _noop(*args, **kwargs):
    return None


def import_megatron(modules) -> None:
    """Import Megatron as CPU ranks need it (plain jit fusers, see `_eager_jit_fusers`) and
    change nothing else: a process that only forks ranks can hold it."""
    import importlib

    with _eager_jit_fusers():
        for name in modules:
            importlib.import_module(name)


def install() -> None:
    """Idempotent; safe to call from every entry point that touches Megatron on CPU."""
    global _installed
    if _installed:
        return
    import_megatron(("megatron.core.tensor_parallel.random",))
    import megatron.core.tensor_parallel.random as mrandom

    # A device, not an index: Megatron passes it as `device=` (rotary tables, SP gathers and
    # reduce-scatters, p2p buffers), which then needs no redirect.
    torch.cuda.current_device = lambda: torch.device("cpu")
    torch.cuda.synchronize = _noop
    torch.cuda.manual_seed = lambda seed: None
    torch.cuda.manual_seed_all = lambda seed: None
    torch.cuda.empty_cache = _noop
    mrandom.CudaRNGStatesTracker = CpuRNGStatesTracker
    mrandom._CUDA_RNG_STATE_TRACKER = CpuRNGStatesTracker()
    mrandom._CUDA_RNG_STATE_TRACKER_INITIALIZED = True
    mrandom.initialize_rng_tracker = _keep_cpu_tracker(mrandom.initialize_rng_tracker)
    _MODE.__enter__()
    _host_alltoall_dispatcher()
    _passes_without_the_mode()
    _installed = True


def _host_alltoall_dispatcher() -> None:
    """Megatron's alltoall token dispatcher on host memory. Without this its constructor
    raises `RuntimeError: torch.cuda.Stream requires CUDA support` (a class-wide side stream
    for device-to-host copies of the split sizes), its forward calls
    torch.cuda.current_stream(), and at expert parallelism > 1 it hands gloo's
    all_to_all_single its split sizes as arrays where gloo takes lists of ints. On CPU the
    sizes are already on the host: the copy point just turns them into lists (the tensor
    parallel split stays an array, which the dispatcher calls .tolist() on)."""
    import megatron.core.transformer.moe.token_dispatcher as dispatcher

    cls = dispatcher.MoEAlltoAllTokenDispatcher
    cls.cuda_dtoh_stream = _HOST_STREAM   # not None: the constructor creates no CUDA stream

    def host_dtoh_and_synchronize(self, point, tokens_per_expert=None):
        if not self.drop_and_pad and point == self.cuda_dtoh_point:
            for name in ("input_splits", "output_splits"):
                value = getattr(self, name)
                if value is not None and not isinstance(value, list):
                    setattr(self, name, [int(n) for n in value.tolist()])
            if isinstance(self.output_splits_tp, torch.Tensor):
                self.output_splits_tp = self.output_splits_tp.numpy()
        return tokens_per_expert

    cls._maybe_dtoh_and_synchronize = host_dtoh_and_synchronize


_HOST_STREAM = object()   # what the dispatcher keeps as its side stream on a CPU rank


def _pass_through(model=None, **kwargs):
    """torch.compile's signature, compiling nothing: `@compile`, `compile(fn)`, `@compile(...)`."""
    return model if model is not None else (lambda fn: fn)


@contextlib.contextmanager
def _eager_jit_fusers():
    """Megatron binds torch.compile as its `jit_fuser` when megatron.core is first imported and
    decorates its fused bias / activation / RoPE helpers with it; each torch.compile call
    imports inductor, about 3.5 s of every CPU rank's start, for kernels a CPU rank runs
    eagerly (and would compile with a C++ compiler on first use). Imported under a
    pass-through torch.compile they stay plain functions, the same maths; torch.compile itself
    is restored at once. No effect once megatron.core is imported (then it is too late)."""
    import sys

    if "megatron.core" in sys.modules:
        yield
        return
    real = torch.compile
    torch.compile = _pass_through
    try:
        yield
    finally:
        torch.compile = real


def _keep_cpu_tracker(original):
    """Megatron may re-create its tracker (force_reset); keep it a CPU one."""
    import megatron.core.tensor_parallel.random as mrandom

    def initialize_rng_tracker(*args, force_reset=False, **kwargs):
        if force_reset or not isinstance(mrandom._CUDA_RNG_STATE_TRACKER, CpuRNGStatesTracker):
            mrandom._CUDA_RNG_STATE_TRACKER = CpuRNGStatesTracker()
            mrandom._CUDA_RNG_STATE_TRACKER_INITIALIZED = True

    return initialize_rng_tracker
