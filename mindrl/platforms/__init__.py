"""Machinery that exists for one platform only; mindrl/device.py decides which applies."""
