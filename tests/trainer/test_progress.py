"""Progress in a log file is plain lines: one console line every log_interval steps and at the
last step, and no carriage-return frames; on a terminal the bar draws."""

import io

from mindrl.trainer.progress import StepProgress

METRICS = {"critic/score/mean": 0.5, "response_length/mean": 3.0, "timing_s/step": 0.2}


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_log_file_gets_plain_lines_at_the_log_interval():
    lines, stream = [], io.StringIO()
    progress = StepProgress(start=2, total=9, log_interval=3, log=lines.append, stream=stream)
    for step in range(3, 10):
        progress.step_done(step, METRICS)
    progress.close()
    assert [line.split(" |")[0] for line in lines] == ["step 3/9", "step 6/9", "step 9/9"]
    assert "score 0.5" in lines[0] and "step_s 0.2" in lines[0]
    assert stream.getvalue() == "" and not any("\r" in line for line in lines)


def test_a_terminal_gets_the_bar(capsys):
    lines, stream = [], Terminal()
    progress = StepProgress(start=0, total=2, log_interval=1, log=lines.append, stream=stream)
    for step in (1, 2):
        progress.step_done(step, METRICS)
    progress.close()
    assert lines == [] and "\r" in stream.getvalue() and "2/2" in stream.getvalue()
    assert "step 2/2 | score 0.5" in capsys.readouterr().out   # printed above the bar
