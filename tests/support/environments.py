"""Environments the tests run (rollout/environment.py's protocol), by `module:Class` or this
file's path."""

from mindrl.rollout.environment import Observation


class TwoTurns:
    """Rewards every model turn it sees 0.5; answers the first "no" and ends at the second:
    a random-init model's episode scores 0 (no turn ended on its own), 0.5 or 1."""

    def reset(self, sample: dict) -> None:
        self.turns = 0

    def step(self, turn_text: str) -> Observation:
        self.turns += 1
        return Observation(text="no", done=self.turns >= 2, reward=0.5)
