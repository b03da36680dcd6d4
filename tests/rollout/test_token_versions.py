"""With an in-flight sync each engine answers, per token, how many syncs it had taken in when it
sampled the token; the rollout group turns those counts into the policy versions they stood
for (RolloutGroup.synced logs each sync's version), right-padded like the responses."""

import torch

from mindrl.data.batch import Batch
from mindrl.rollout.engine_group import RolloutGroup


def test_each_token_s_count_of_syncs_maps_to_the_version_it_stood_for():
    group = RolloutGroup.__new__(RolloutGroup)
    group.policy_version, group.commit_versions = 0, [0]
    group.synced(5)            # a run resumed at step 5: its first sync brings version 5
    group.synced(6)
    assert group.policy_version == 6
    versions = group.token_versions(_part(), [[1, 1, 2], [2, 2, 2, 2]])
    assert versions["token_policy_version"].tolist() == [[5, 5, 6, 0], [6, 6, 6, 6]]


def _part():
    return Batch.from_prompts([[1, 2]], 2, pad_id=0).add(
        response_ids=torch.zeros((2, 4), dtype=torch.long))
