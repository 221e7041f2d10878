"""data.val_file_settings in a stage's validation: the same greedy responses, scored with and without
the overlong penalty by the entry's own setting (RLTrainer.validate passes each row's setting)."""

from __future__ import annotations

from rl_helpers import tiny_rl_files, tiny_rl_trainer


def test_validation_scores_follow_the_entrys_overlong_setting(tmp_path):
    files = tiny_rl_files(tmp_path)
    val = f"{tmp_path}/data/test.parquet"
    # a ramp over the whole budget of 8 tokens: every response of L tokens loses L / 8
    common = (f"data.val_files=[{val}]", "rollout.response_length=8", "reward.overlong_buffer.len=8")
    scores = {}
    for name, overrides in (("stage_on", ("reward.overlong_buffer.enable=true",)),
                            ("entry_off", ("reward.overlong_buffer.enable=true", f"data.val_file_settings={{{val}: {{overlong_penalty: false}}}}")),
                            ("entry_on", (f"data.val_file_settings={{{val}: {{overlong_penalty: true}}}}",))):
        metrics = tiny_rl_trainer(files, *common, *overrides, run=name).validate(0)
        scores[name] = {k: v for k, v in metrics.items() if "/score/" in k}
    assert scores["stage_on"] and scores["entry_on"] == scores["stage_on"]  # the penalty added for the entry alone
    # left out for the entry: every response has 1 to 8 tokens, so its penalty is between -1/8 and -1
    for k, with_penalty in scores["stage_on"].items():
        assert 1 / 8 - 1e-6 <= scores["entry_off"][k] - with_penalty <= 1 + 1e-6
