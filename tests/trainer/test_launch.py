"""Starting the run's local Ray cluster (trainer/launch.init_ray): a start that times out on a
busy machine is cleaned up and tried again; any other failure is raised at once."""

import subprocess
import sys

import pytest

from mindrl.trainer import launch


class FakeRay:
    """ray.init that fails `fails` times as Ray 2.60 does on a loaded box, leaving a process
    behind each time (as a half-started node leaves its GCS and raylet)."""

    def __init__(self, fails, error="The current node timed out during startup. This could "
                                    "happen because some of the raylet failed to startup"):
        self.fails, self.error, self.calls, self.left = fails, error, 0, []

    def init(self, **kwargs):
        self.calls += 1
        if self.calls <= self.fails:
            self.left.append(subprocess.Popen([sys.executable, "-c",
                                               "import time; time.sleep(60)"]))
            raise Exception(self.error)


@pytest.fixture
def fake_ray(monkeypatch):
    def make(*args, **kwargs):
        fake = FakeRay(*args, **kwargs)
        monkeypatch.setitem(sys.modules, "ray", fake)
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
        return fake
    return make


def test_a_start_that_timed_out_is_cleaned_up_and_tried_again(fake_ray, capsys):
    fake = fake_ray(fails=2)
    assert launch.init_ray(1) == "started a local Ray cluster"
    assert fake.calls == 3
    assert all(p.poll() is not None for p in fake.left)     # the failed starts' processes
    assert capsys.readouterr().out.count("Ray's local start timed out") == 2


def test_a_start_that_keeps_timing_out_or_fails_otherwise_raises(fake_ray):
    fake = fake_ray(fails=launch.LOCAL_START_TRIES)
    with pytest.raises(Exception, match="timed out during startup"):
        launch.init_ray(1)
    assert fake.calls == launch.LOCAL_START_TRIES
    other = fake_ray(fails=1, error="no space left on device")
    with pytest.raises(Exception, match="no space left"):
        launch.init_ray(1)
    assert other.calls == 1
    for p in fake.left + other.left:
        p.kill()
