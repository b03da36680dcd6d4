"""Rule rewards for R1-Zero-style RL: named verifiers, weighted, scored in a killable pool.

Importing the package registers the built-in verifiers: base_acc, acc, strict_format, format,
boxed_acc, boxed_format (EasyR1's math reward), countdown, arith, max_digit, acc_for_dapo
(DAPO's +1/-1).
"""

from . import builtin  # noqa: F401  (registers the built-in verifiers)
from .overlong import overlong_penalty
from .pool import ERROR, OK, TIMEOUT, Outcome, VerifierPool, WorkerPool
from .registry import VERIFIERS, get_verifier, register_verifier
from .rule_reward import OverlongConfig, RuleReward

__all__ = [
    "builtin",
    "VERIFIERS",
    "register_verifier",
    "get_verifier",
    "RuleReward",
    "OverlongConfig",
    "VerifierPool",
    "WorkerPool",
    "Outcome",
    "OK",
    "ERROR",
    "TIMEOUT",
    "overlong_penalty",
]
