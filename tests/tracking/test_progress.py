"""A progress bar with the stage's ETA on an interactive terminal; one line per step everywhere else."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import select
import struct
import sys
import tempfile
import termios
import time

from cli_run_helpers import tiny_run, write_config
from fork_run_helpers import start_forked
from posttrain.tracking import build_trackers


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def _log_steps(monkeypatch, tmp_path, stream, resumed=0):
    monkeypatch.setattr(sys, "stdout", stream)
    trackers = build_trackers(["console"], tmp_path, 4, resumed=resumed)
    for step in range(resumed + 1, 5):
        trackers.log({"critic/score/mean": step / 10}, step)
    trackers.close()
    return stream.getvalue()


def test_a_terminal_gets_a_bar_with_the_eta_and_the_step_lines_above_it(monkeypatch, tmp_path):
    out = _log_steps(monkeypatch, tmp_path, Terminal())
    assert "\r" in out and "4/4" in out and "<00:00" in out  # tqdm's elapsed<remaining
    lines = [line.split("\r")[-1] for line in out.split("\n") if "step " in line]
    assert [line.split(" | ")[1] for line in lines] == ["score 0.1", "score 0.2", "score 0.3", "score 0.4"]


def test_a_resumed_stage_starts_its_bar_at_the_resumed_step(monkeypatch, tmp_path):
    out = _log_steps(monkeypatch, tmp_path, Terminal(), resumed=2)
    assert "2/4" in out and "1/4" not in out and "4/4" in out


def test_a_file_or_pipe_gets_one_plain_line_per_step(monkeypatch, tmp_path):
    out = _log_steps(monkeypatch, tmp_path, io.StringIO())
    assert "\r" not in out
    assert out.splitlines() == [f"step {s}/4 | score 0.{s}" + out.splitlines()[s - 1].partition(f"score 0.{s}")[2] for s in range(1, 5)]
    assert all(" | eta " in line for line in out.splitlines())


def test_posttrain_train_on_a_terminal_shows_the_stage_and_validation_bars(tmp_path):
    overrides = [*tiny_run(tmp_path), "trainer.logger=[console]", "trainer.total_training_steps=2",
                 f"data.val_files={tmp_path / 'data' / 'test.parquet'}", "data.val_batch_size=2"]
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 160, 0, 0))  # a 160-column terminal
    # A process of its own whose standard output is the terminal (tests/fork_run_helpers.py)
    with os.fdopen(follower, "wb") as terminal, tempfile.TemporaryFile() as err:
        proc = start_forked("train", str(write_config(tmp_path)), *overrides, cwd=tmp_path, env=None, stdout=terminal, stderr=err)
        chunks, ended, deadline = [], False, time.monotonic() + 300
        while time.monotonic() < deadline:  # read the terminal until the process has ended and it is drained
            if select.select([leader], [], [], 0.2)[0]:
                try:
                    data = os.read(leader, 65536)
                except OSError:  # every end of the terminal's other side is closed
                    break
                if not data:
                    break
                chunks.append(data)
            elif ended:
                break
            else:
                ended = proc.poll() is not None
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)
        err.seek(0)
        errors = err.read().decode(errors="replace")
    os.close(leader)
    out = b"".join(chunks).decode(errors="replace")
    assert proc.returncode == 0, errors[-3000:]
    assert "train: 100%" in out and "2/2" in out  # the stage's bar, finished
    assert "validation:" in out and "batch/s" in out  # the validation pass over 2 batches
    assert "step 1/2 |" in out and "step 2/2 |" in out  # the step lines above the bar
