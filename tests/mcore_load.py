"""Loading a Megatron checkpoint into a model of another shape or head, for error tests."""

from megatron.core import parallel_state as ps

from mindrl.ckpt import mcore_io
from mindrl.models.builder import Parallelism, build_gpt_model, initialize_parallel


def load_error(spec, ckpt):
    """The McoreCheckpointError message of loading `ckpt` into a TP1 model of `spec`, or None
    when it loads (initialises and tears down model parallelism around the attempt)."""
    initialize_parallel(Parallelism())
    try:
        mcore_io.load_mcore_checkpoint(build_gpt_model(spec, Parallelism()), ckpt)
        return None
    except mcore_io.McoreCheckpointError as e:
        return str(e)
    finally:
        ps.destroy_model_parallel()
