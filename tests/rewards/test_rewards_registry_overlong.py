"""Registry lookups and the DAPO overlong penalty (pure functions, no pool)."""

import pytest

from mindrl.rewards import VERIFIERS, get_verifier, overlong_penalty, register_verifier


def test_builtin_verifiers_registered():
    assert {"base_acc", "acc", "strict_format", "format", "countdown", "arith"} <= set(VERIFIERS)


def test_unknown_verifier_names_known_ones():
    with pytest.raises(ValueError, match="unknown verifier 'nope'.*base_acc.*countdown"):
        get_verifier("nope")


def test_name_clash_is_rejected():
    with pytest.raises(ValueError, match="already registered"):

        @register_verifier("acc")
        def other(completion, label, **extra):
            return 0.0

    assert get_verifier("acc").__module__ == "mindrl.rewards.math_verifiers"


def test_overlong_penalty_ramp():
    lengths = [0, 60, 80, 90, 100, 120]
    got = overlong_penalty(lengths, max_response_length=100, overlong_buffer_len=20, penalty_factor=2.0)
    assert got == pytest.approx([0.0, 0.0, 0.0, -1.0, -2.0, -2.0])


@pytest.mark.parametrize("buffer,factor", [(0, 1.0), (101, 1.0), (10, -1.0)])
def test_overlong_penalty_rejects_bad_settings(buffer, factor):
    with pytest.raises(ValueError):
        overlong_penalty([1], 100, buffer, factor)
