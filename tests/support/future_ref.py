"""What a Ray remote call returns, for rollout tests over engines answered by hand: a
hashable reference whose `future()` is a concurrent.futures.Future of the answer."""


class FutureRef:
    def __init__(self, future):
        self._future = future

    def future(self):
        return self._future
