"""A user's verifier that reads a dataset's additional keys (imported by module name in the
verifier pool's workers, as `worker_imports=["support.extra_key_verifiers"]`)."""

from mindrl.rewards import register_verifier


@register_verifier("test_sum_of_numbers")
def sum_of_numbers(completion, label, numbers=None, target=None, **extra):
    """1.0 iff the completion is the sum of the row's `numbers` and that sum is its `target`."""
    total = sum(int(x) for x in numbers)
    return float(completion.strip() == str(total) and str(total) == str(target))
