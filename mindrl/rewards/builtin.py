"""Importing this module registers the built-in verifiers (base_acc, acc, strict_format,
format, boxed_acc, boxed_format, countdown, arith, max_digit, acc_for_dapo, tool_answer,
tool_answer_digits, tool_boxed_acc, tool_answer_em): the one import
that the package, the verifier pool's workers and config validation share, so none of them
imports the package that imports them."""

from . import (arith, boxed_verifiers, countdown, dapo_verifiers, format_verifiers,
               math_verifiers, max_digit, tool_answer)

__all__ = ["arith", "boxed_verifiers", "countdown", "dapo_verifiers", "format_verifiers",
           "math_verifiers", "max_digit", "tool_answer"]
