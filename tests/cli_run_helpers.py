"""Running `posttrain` as a user does, on a tiny RL stage (a module name no other test folder uses):
the user-fault tests assert the exit status, the one-line message and that no Python traceback
reached the terminal.

By default the command runs in this process (`posttrain.cli.main` with the output captured, as
`python -m posttrain` calls it): a fresh interpreter spends ~5 s importing torch and transformers
before it reads the config, which across these tests was minutes of CI. An exception escaping
`main` fails the test with its traceback, as it would have reached the user's terminal. A run with
worker processes (or a decoupled run's explorer and trainer) runs in this process too, with
`fds=True`: its workers are forked from posttrain's fork server (posttrain.cluster.process_start),
and what they print to the inherited console is captured. Tests of what only a process of its own
shows (a reward function calling `sys.exit`, a hang, the test hook killing the process that trains)
fork it from that server (tests/fork_run_helpers.py, no fresh imports); those that need a fresh
interpreter (environment variables read at import, Ray's driver state) pass `subprocess=True`.
"""

from __future__ import annotations

import io
import os
import sys
import tempfile
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path
from subprocess import CompletedProcess
from subprocess import run as run_process
from typing import Iterator

from posttrain.models.tiny import make_tiny_model
from posttrain.tasks import write_task_data

# 4 prompts x 2 responses of up to 6 tokens, one step, no trackers: a few seconds on CPU.
TINY_RL = [
    "data.max_prompt_length=32", "data.max_response_length=6", "data.train_batch_size=4", "rollout.n=2",
    "actor.ppo_mini_batch_size=4", "actor.ppo_micro_batch_size_per_gpu=8", "trainer.total_training_steps=1",
    "trainer.logger=[]",
]


def tiny_run(root: Path) -> list[str]:
    """Build a 1-layer model and the sort task under `root`; the overrides of a one-step run on them."""
    model = make_tiny_model(root / "model", layers=1, hidden=32, heads=4, seed=0)
    write_task_data("sort", root / "data", train=8, test=4, sft=0, dpo=0)
    return [
        f"model.path={model}", f"data.train_files={root / 'data' / 'train.parquet'}",
        f"trainer.default_local_dir={root / 'run'}", *TINY_RL,
    ]


def posttrain(*args: str, cwd: Path, timeout: float = 300, subprocess: bool = False, env: dict[str, str] | None = None,
              fds: bool = False) -> CompletedProcess:
    """`python -m posttrain ARGS` in `cwd`, output captured as text (in this process unless `subprocess`;
    `timeout` bounds the subprocess only). `env` is set in the environment for the call. With `fds`,
    what the processes it starts write to this process's standard output and error (worker rank 0,
    the trainer of a decoupled run) is captured too, after what this process printed."""
    if subprocess:
        return run_process([sys.executable, "-m", "posttrain", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                           env=dict(os.environ, **(env or {})))
    from posttrain.cli import main

    out, err, here, before = io.StringIO(), io.StringIO(), os.getcwd(), dict(os.environ)
    os.chdir(cwd)
    os.environ.update(env or {})
    try:
        with capture_fds(fds) as inherited, redirect_stdout(out), redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exit_:  # argparse's usage errors, as the interpreter would report them
                code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    finally:
        os.chdir(here)
        os.environ.clear()
        os.environ.update(before)
    return CompletedProcess(list(args), code, out.getvalue() + inherited[1], err.getvalue() + inherited[2])


@contextmanager
def capture_fds(enabled: bool) -> Iterator[dict[int, str]]:
    """File descriptors 1 and 2 point at temporary files inside the block; their text is in the
    dict (keys 1 and 2) after it. Disabled: the dict holds empty strings."""
    texts = {1: "", 2: ""}
    if not enabled:
        yield texts
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in texts}
    files = {fd: tempfile.TemporaryFile() for fd in texts}
    try:
        for fd, file in files.items():
            os.dup2(file.fileno(), fd)
        yield texts
    finally:
        for fd, file in files.items():
            os.dup2(saved[fd], fd)
            os.close(saved[fd])
            file.seek(0)
            texts[fd] = file.read().decode("utf-8", errors="replace")
            file.close()


def write_config(root: Path, text: str = "{}\n") -> Path:
    path = root / "exp.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def assert_user_error(out: CompletedProcess, *fragments: str) -> str:
    """Exit status 2, one `posttrain: error:` message holding every fragment, no traceback; returns it."""
    both = out.stdout + out.stderr
    assert "Traceback" not in both, both[-4000:]
    assert out.returncode == 2, both[-4000:]
    errors = [line for line in out.stderr.splitlines() if line.startswith("posttrain: error:")]
    assert len(errors) == 1, out.stderr[-4000:]
    for fragment in fragments:
        assert fragment in errors[0], f"{fragment!r} not in {errors[0]!r}"
    return errors[0]
