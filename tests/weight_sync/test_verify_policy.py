"""generate_config.verify_sync: which syncs are verified."""

import pytest

from mindrl.weight_sync.manager import verify_due


def test_every_first_and_off():
    assert [verify_due("every", n) for n in range(3)] == [True, True, True]
    assert [verify_due("first", n) for n in range(3)] == [True, False, False]
    assert [verify_due("off", n) for n in range(3)] == [False, False, False]
    with pytest.raises(ValueError, match="verify_sync='sometimes'"):
        verify_due("sometimes", 0)
