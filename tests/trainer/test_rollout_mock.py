"""trainer.rollout_mock: a dump run writes each step's explored batch, a replay run trains on it
without generating and reproduces the dump run's losses; ROLL's rollout_mock translates onto it."""

from __future__ import annotations

import pytest

from posttrain.config.dialects import translate
from posttrain.config.load import load_config
from posttrain.errors import ConfigError, UserError
from rl_helpers import tiny_rl_files, tiny_rl_trainer

LOSSES = ("actor/pg_loss", "actor/grad_norm", "actor/ppo_kl", "critic/score/mean")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return tiny_rl_files(tmp_path_factory.mktemp("mock"))


def _two_steps(t):
    return [t.step(t._next_prompts(step), step) for step in (1, 2)]


def test_a_replayed_run_trains_on_the_dumped_rollouts_and_reproduces_the_losses(files, tmp_path):
    folder = tmp_path / "dumps"
    dumped = _two_steps(tiny_rl_trainer(files, "trainer.rollout_mock=dump", f"trainer.rollout_mock_dir={folder}", run="dump"))
    assert sorted(p.name for p in (folder / "train").iterdir()) == ["step_000001.experience", "step_000002.experience"]
    # The replay run samples differently (another seed for the engine's noise), but never generates.
    replay = tiny_rl_trainer(files, "trainer.rollout_mock=replay", f"trainer.rollout_mock_dir={folder}", "rollout.seed=7", run="replay")
    replay.roles.rollout.generate = lambda *a, **k: pytest.fail("a replay run generated")  # type: ignore[method-assign]
    replayed = _two_steps(replay)
    for before, after in zip(dumped, replayed):
        assert {k: before[k] for k in LOSSES} == {k: after[k] for k in LOSSES}
    with pytest.raises(UserError, match=r"step 3 has no dumped rollouts .*step_000003.experience does not exist"):
        replay.step(replay._next_prompts(3), 3)
    # The control: generating with that seed trains on other rollouts, so the equality above is the replay's.
    generated = tiny_rl_trainer(files, "rollout.seed=7", run="generated")
    assert generated.step(generated._next_prompts(1), 1)["actor/pg_loss"] != dumped[0]["actor/pg_loss"]


def test_bad_combinations_are_refused():
    for overrides, message in (
        (["trainer.rollout_mock=dump"], "needs trainer.rollout_mock_dir"),
        (["trainer.rollout_mock_dir=/tmp/x"], "only read with trainer.rollout_mock"),
        (["trainer.rollout_mock=replay", "trainer.rollout_mock_dir=/tmp/x", "algorithm.kind=sft"], "algorithm.kind sft has none"),
        (["trainer.rollout_mock=replay", "trainer.rollout_mock_dir=/tmp/x", "trainer.mode=train"], "trainer.mode train stores"),
    ):
        with pytest.raises(ConfigError, match=message):
            load_config(None, overrides)


def test_roll_s_rollout_mock_is_dump_or_replay():
    native, report = translate({"rollout_mock": {"enable": True, "mode": "mock", "dump_dir": "./out/d"}}, "roll")
    assert not report.refused and native["trainer"] == {"rollout_mock": "replay", "rollout_mock_dir": "./out/d"}
    native, _ = translate({"rollout_mock": {"enable": True}}, "roll")  # ROLL's defaults: dump to ./rollout_mock_dumps
    assert native["trainer"] == {"rollout_mock": "dump", "rollout_mock_dir": "./rollout_mock_dumps"}
    native, report = translate({"rollout_mock": {"enable": False, "mode": "mock"}}, "roll")
    assert "trainer" not in native and report.entry("rollout_mock").status == "dropped"
    _, report = translate({"rollout_mock": {"enable": True, "mode": "record"}}, "roll")
    assert "expected mode dump or mock" in report.entry("rollout_mock").reason
