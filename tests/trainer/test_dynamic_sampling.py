"""DAPO dynamic sampling: which groups are kept."""

from mindrl.trainer.dynamic_sampling import informative_groups, select_groups


def test_groups_with_equal_scores_are_dropped():
    scores = [1, 1, 0, 1, 0, 0, 0.5, 0.5, 1.0, 1.0]
    prompt_index = [0, 0, 1, 1, 2, 2, 3, 3, 4, 5]
    # group 0: all 1, group 2: all 0, group 3: all 0.5, groups 4/5: single samples
    assert informative_groups(scores, prompt_index) == [1]


def test_top_up_keeps_informative_first():
    assert select_groups([7, 3], [1, 2, 5], 4) == [7, 3, 1, 2]
    assert select_groups([7, 3, 9], [1], 2) == [7, 3]
    assert select_groups([], [4], 1) == [4]
