"""Importing this module registers the built-in verifiers (base_acc, acc, strict_format,
format, countdown, arith): the one import that the package, the verifier pool's workers and
config validation share, so none of them imports the package that imports them."""

from . import arith, countdown, format_verifiers, math_verifiers  # noqa: F401  (registration)
