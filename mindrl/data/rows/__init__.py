"""The step's rows: how a Batch's samples become model inputs, in one place so that there is
one seam between the step's data and a model's. The engine calls this package by this entry
(``from mindrl.data import rows``): `plan` (which samples go to which DP rank and micro batch:
by rows, or by a token budget), `mini_batches` (the update's split), `micro_batches` (a rank's
micro batches in the padded or packed layout, on its device) and the readings back
(`next_token_targets`, `at_positions`, `sample_lengths`).

One module a job: plans (the plans and the choice between them), padded and packed (the two
layouts; packed holds `sample_lengths`, the real tokens a token plan counts), micro (a plan's
micro batches as model inputs). Megatron is imported only when a packed micro batch is built.
"""

from mindrl.data.rows.micro import at_positions, micro_batches, next_token_targets
from mindrl.data.rows.packed import sample_lengths
from mindrl.data.rows.plans import Plan, mini_batches, plan

__all__ = ["Plan", "at_positions", "micro_batches", "mini_batches", "next_token_targets",
           "plan", "sample_lengths"]
