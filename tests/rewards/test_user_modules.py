"""Verifiers of a user's own from a .py file (rewards/user_modules.py): a file anywhere,
named relative to the working directory, registers its verifiers in the trainer's process and
in every verifier worker (which load it by its absolute path); loading it again is the same
module; a file that cannot load is refused naming it and the cause."""

import os
import sys

import pytest

from mindrl.rewards import RuleReward
from mindrl.rewards.registry import VERIFIERS
from mindrl.rewards.user_modules import absolute, load

VERIFIER = '''
from mindrl.rewards import register_verifier

@register_verifier("{name}")
def last_word_is_label(completion, label, **extra):
    """1 when the last word is the label."""
    words = completion.split()
    return float(bool(words) and words[-1] == str(label))
'''


def _file(tmp_path, name):
    path = tmp_path / "rewards" / f"{name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(VERIFIER.format(name=name))
    return path


def test_a_file_named_from_the_working_directory_scores_in_the_workers(tmp_path, monkeypatch):
    _file(tmp_path, "test_user_last_word")
    monkeypatch.chdir(tmp_path)
    reward = RuleReward(["test_user_last_word"], [2.0], verifier_parallel=2,
                        worker_imports=["rewards/test_user_last_word.py"])
    try:
        monkeypatch.chdir("/")          # the workers hold the absolute path
        scores, metrics = reward.score(["so it is 7", "7 not", "", "it is 4"], ["7", "7", "7", "4"])
        assert scores == [2.0, 0.0, 0.0, 2.0]      # weight 2
        assert metrics["rewards/errors"] == 0.0 and metrics["rewards/test_user_last_word"] == 0.5
    finally:
        reward.close()


def test_loading_twice_is_one_module_and_a_bad_file_is_named(tmp_path):
    path = _file(tmp_path, "test_user_twice")
    first = load(str(path))
    assert load(str(path)) is first and VERIFIERS["test_user_twice"].__module__ == first.__name__
    assert first.__name__ in sys.modules
    assert absolute(["a.py", "pkg.mod"]) == [os.path.join(os.getcwd(), "a.py"), "pkg.mod"]
    broken = tmp_path / "broken.py"
    broken.write_text("def oops(:\n")
    with pytest.raises(ValueError, match=r"'.*broken.py' cannot be loaded: SyntaxError"):
        load(str(broken))
    assert not [m for m in sys.modules if m.startswith("mindrl_user_verifiers_broken")]
    with pytest.raises(ValueError, match="cannot be loaded: FileNotFoundError: no file"):
        load(str(tmp_path / "absent.py"))
