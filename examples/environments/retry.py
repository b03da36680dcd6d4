"""An environment that lets the model try again (docs/guides/agentic.md#writing-an-environment):
the model's answer is checked against the row's label; a right one ends the episode with a
reward that halves with every earlier wrong try, a wrong one is answered "no" and the model
answers again, up to agent_config.max_turns.

    agent_config.environment=examples/environments/retry.py:Retry agent_config.reward=environment

It runs in the trainer's process, one instance per sample: nothing here is sandboxed, which is
fine for comparing strings, not for running what the model wrote (a tool does that:
agent_config.tools=[python]).
"""

from mindrl.rollout.environment import Observation


class Retry:
    wrong = "no"          # the next user turn after a wrong answer

    def reset(self, sample: dict) -> None:
        self.label = str(sample["label"]).strip()
        self.tries = 0

    def step(self, turn_text: str) -> Observation:
        self.tries += 1
        if turn_text.strip() == self.label:
            return Observation(done=True, reward=0.5 ** (self.tries - 1))
        return Observation(text=self.wrong)
