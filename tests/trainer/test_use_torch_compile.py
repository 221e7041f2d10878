"""`actor.use_torch_compile` switches an RL stage's training forward to the compiled lean forward."""

from __future__ import annotations

import pytest

from posttrain.modeling import lean_forward
from posttrain.trainer.rl import RLTrainer
from rl_helpers import tiny_rl_files, tiny_rl_trainer


@pytest.fixture
def files(tmp_path):
    yield tiny_rl_files(tmp_path)
    lean_forward.set_mode("off")  # process-wide: leave it as the other tests expect


def _trainer(files, compile_: bool) -> RLTrainer:
    return tiny_rl_trainer(
        files, "data.max_response_length=4", f"actor.use_torch_compile={str(compile_).lower()}", run=f"run-{compile_}"
    )


def test_the_flag_selects_the_compiled_lean_forward_and_its_absence_resets_it(files):
    _trainer(files, True)
    assert lean_forward.MODE == "compiled"
    _trainer(files, False)
    assert lean_forward.MODE == "off"
