"""Skips for what a test needs of the machine, asked of the device (never assumed)."""

import pytest

from mindrl import device

needs_bf16 = pytest.mark.skipif(
    not device.bf16_supported(),
    reason=f"this {device.device_type()} device does not compute in bf16 "
           f"(device.bf16_supported() is False)")
