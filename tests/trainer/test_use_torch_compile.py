"""`actor.use_torch_compile` switches an RL stage's training-side forwards (actor, reference, critic)
to the compiled lean forward, as each role's own setting."""

from __future__ import annotations

import pytest

from posttrain.trainer.rl import RLTrainer
from rl_helpers import tiny_rl_files, tiny_rl_trainer


@pytest.fixture
def files(tmp_path):
    return tiny_rl_files(tmp_path)


def _trainer(files, compile_: bool) -> RLTrainer:
    return tiny_rl_trainer(
        files, "data.max_response_length=4", f"actor.use_torch_compile={str(compile_).lower()}",
        "actor.use_kl_loss=true", run=f"run-{compile_}",
    )


def test_the_flag_selects_the_compiled_lean_forward_per_role(files):
    roles = _trainer(files, True).roles
    assert (roles.actor.s.lean_forward, roles.reference.lean_forward) == ("compiled", "compiled")
    roles = _trainer(files, False).roles
    assert (roles.actor.s.lean_forward, roles.reference.lean_forward) == ("off", "off")
