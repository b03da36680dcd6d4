"""A verifier written as a user writes one, in a file outside the package
(rl_config.verifier_modules): the smoke task's rule again, by another route than the built-in
`arith` (the completion's leading number equals the label), so a run listing both with weight 0
for this one logs equal means for the two."""

import re

from mindrl.rewards import register_verifier

LEADING_NUMBER = re.compile(r"\s*(\d+)")


@register_verifier("test_first_number")
def first_number(completion: str, label: str, **extra) -> float:
    found = LEADING_NUMBER.match(completion)
    return float(found is not None and found.group(1) == str(label).strip())
