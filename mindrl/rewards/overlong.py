"""DAPO soft overlong punishment: discourage responses that run into the length limit."""

from __future__ import annotations

from typing import List, Sequence


def overlong_penalty(
    response_lengths: Sequence[int],
    max_response_length: int,
    overlong_buffer_len: int,
    penalty_factor: float,
) -> List[float]:
    """Per-response penalty: 0 up to `max - buffer` tokens, then linear down to
    `-penalty_factor` at `max` (and beyond, for lengths that were cut off there).

    A ramp instead of a cliff keeps the reward signal smooth near the limit, so truncated
    samples are not confused with wrong ones (DAPO, Yu et al. 2025).
    """
    if not 0 < overlong_buffer_len <= max_response_length:
        raise ValueError(
            f"overlong_buffer_len must be in (0, max_response_length={max_response_length}], "
            f"got {overlong_buffer_len}"
        )
    if penalty_factor < 0:
        raise ValueError(f"penalty_factor must be >= 0, got {penalty_factor}")
    free = max_response_length - overlong_buffer_len
    return [
        -penalty_factor * min(max(length - free, 0) / overlong_buffer_len, 1.0)
        for length in response_lengths
    ]
