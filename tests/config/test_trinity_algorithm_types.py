"""Trinity-RFT algorithm types translate into the parts they bundle (trinity/algorithm/algorithm.py)."""

import pytest

from posttrain.config.dialects import translate


def _get(native, path, default=None):
    node = native
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def _entry(report, key):
    return next(e for e in report.entries if e.key == key)


def test_no_algorithm_type_is_trinitys_default_ppo():
    native, report = translate({"algorithm": {"repeat_times": 1}}, "trinity")
    assert _get(native, "algorithm.kind") == "rl" and _get(native, "algorithm.adv_estimator") == "gae"
    assert _get(native, "actor.policy_loss.loss_mode") == "vanilla" and _get(native, "actor.use_kl_loss") is True
    assert "not written in the file" in _entry(report, "algorithm.algorithm_type").reason


@pytest.mark.parametrize("kind, estimator, loss, kl_loss", [
    ("grpo", "grpo", "vanilla", True),
    ("reinforceplusplus", "reinforce_plus_plus", "vanilla", True),
    ("rloo", "rloo", "vanilla", True),
    ("opmd", "opmd", "opmd", True),
    ("asymre", "asymre", "opmd", False),
    ("topr", "reinforce", "topr", True),
    ("cispo", "grpo", "cispo", True),
    ("gspo", "grpo", "gspo", True),
    ("sapo", "grpo", "sapo", True),
    ("sppo", "opmd", "sppo", False),
    ("rec", "rec", "rec", True),
])
def test_rl_types_select_estimator_loss_and_kl(kind, estimator, loss, kl_loss):
    native, report = translate({"algorithm": {"algorithm_type": kind}}, "trinity")
    assert not report.refused, [(e.key, e.reason) for e in report.refused]
    assert (_get(native, "algorithm.adv_estimator"), _get(native, "actor.policy_loss.loss_mode")) == (estimator, loss)
    assert _get(native, "actor.use_kl_loss") is kl_loss


def test_topr_reads_trinitys_reinforce_advantage_and_args_override_defaults():
    native, _ = translate({"algorithm": {"algorithm_type": "topr"}}, "trinity")
    assert _get(native, "algorithm.adv_estimator_args") == {"reinforce_mode": "outcome"}
    native, report = translate({"algorithm": {
        "algorithm_type": "opmd", "advantage_fn_args": {"tau": 0.5, "opmd_baseline": "logavgexp"},
        "policy_loss_fn_args": {"tau": 2.0, "clip_range": 0.3, "loss_agg_mode": "seq-mean-token-mean"}}}, "trinity")
    assert _get(native, "algorithm.adv_estimator_args") == {"tau": 0.5, "opmd_baseline": "logavgexp"}
    assert _get(native, "actor.policy_loss.loss_args") == {"tau": 2.0}
    assert _get(native, "actor.clip_ratio") == 0.3 and _get(native, "actor.loss_agg_mode") == "seq-mean-token-mean"
    _, report = translate({"algorithm": {"algorithm_type": "grpo", "advantage_fn_args": {"rank_penalty": 0.1},
                                         "policy_loss_fn_args": {"enable_sequence_masking": True}}}, "trinity")
    refused = {e.key: e.reason for e in report.refused}
    assert "not an option of posttrain's 'grpo' estimator" in refused["algorithm.advantage_fn_args.rank_penalty"]
    assert "not an option of posttrain's 'vanilla' policy loss" in refused["algorithm.policy_loss_fn_args.enable_sequence_masking"]


def test_grpo_std_threshold_is_dynamic_sampling_and_step_norm_an_estimator_option():
    native, report = translate({"algorithm": {"algorithm_type": "multi_step_grpo", "advantage_fn_args": {
        "epsilon": 1e-6, "std_threshold": 0.0001, "enable_step_norm": True}}}, "trinity")
    assert not report.refused
    assert _get(native, "algorithm.adv_estimator_args") == {"epsilon": 1e-6, "enable_step_norm": True}
    assert _get(native, "algorithm.filter_groups") == {"enable": True, "metric": "seq_reward", "std_threshold": 0.0001}
    native, _ = translate({"algorithm": {"algorithm_type": "grpo", "advantage_fn_args": {"std_threshold": None}}}, "trinity")
    assert _get(native, "algorithm.filter_groups") is None  # Trinity's default: no group skipped
    # std_cal_level: the grpo estimator's own option (batch: the batch's std, each group's mean)
    for level in ("group", "batch"):
        native, report = translate({"algorithm": {"algorithm_type": "grpo", "advantage_fn_args": {"std_cal_level": level}}}, "trinity")
        assert not report.refused and _get(native, "algorithm.adv_estimator_args") == {"std_cal_level": level}
    _, report = translate({"algorithm": {"algorithm_type": "grpo", "advantage_fn_args": {"std_cal_level": "task"}}}, "trinity")
    assert "expected group" in {e.key: e.reason for e in report.refused}["algorithm.advantage_fn_args.std_cal_level"]


def test_an_explicit_advantage_or_loss_fn_wins_over_the_type():
    native, _ = translate({"algorithm": {"algorithm_type": "grpo", "advantage_fn": "rloo", "policy_loss_fn": "sapo",
                                         "policy_loss_fn_args": {"tau_pos": 1.0, "tau_neg": 1.2}}}, "trinity")
    assert _get(native, "algorithm.adv_estimator") == "rloo" and _get(native, "actor.policy_loss.loss_mode") == "sapo"
    assert _get(native, "actor.policy_loss.loss_args") == {"tau_pos": 1.0, "tau_neg": 1.2}
    # Trinity's step-wise GRPO: posttrain's agentic rows hold whole episodes, so it is GRPO over them
    native, _ = translate({"algorithm": {"algorithm_type": "grpo", "advantage_fn": "step_wise_grpo"}}, "trinity")
    assert _get(native, "algorithm.adv_estimator") == "grpo"


@pytest.mark.parametrize("kind", ["on_policy_distill", "jsd"])
def test_distillation_types_take_the_teacher_from_the_first_auxiliary_model(kind):
    raw = {"algorithm": {"algorithm_type": kind}, "explorer": {"auxiliary_models": [{"model_path": "/models/teacher", "tensor_parallel_size": 2}]}}
    native, report = translate(raw, "trinity")
    assert _get(native, "ref.model_path") == "/models/teacher" and _get(native, "algorithm.adv_estimator") == kind
    assert _get(native, "actor.use_kl_loss") is False and _get(native, "algorithm.adv_estimator_args")["kl_coef"] == 1.0
    assert _entry(report, "explorer.auxiliary_models[0].tensor_parallel_size").status == "dropped"
    _, report = translate({"algorithm": {"algorithm_type": kind}}, "trinity")
    assert any("needs a teacher" in e.reason for e in report.refused if e.key == "algorithm.algorithm_type")


def test_mix_reads_its_expert_buffer_and_sizes_the_expert_rows(tmp_path):
    sft = tmp_path / "sft.jsonl"
    sft.write_text('{"messages": []}\n')
    raw = {
        "algorithm": {"algorithm_type": "mix_chord", "repeat_times": 4, "sample_strategy_args": {"expert_data_ratio": 0.2},
                      "policy_loss_fn_args": {"mu_warmup_steps": 10, "mu_peak": 0.5, "train_batch_size_expert": 8, "sft_loss_agg_mode": "token-mean"}},
        "buffer": {"batch_size": 8, "train_batch_size": 40,
                   "trainer_input": {"auxiliary_buffers": {"sft_dataset": {"path": str(sft), "format": {"prompt_type": "messages", "messages_key": "messages"}}}}},
    }
    native, report = translate(raw, "trinity")
    assert not report.refused, [(e.key, e.reason) for e in report.refused]
    mix = _get(native, "algorithm.mix")
    assert mix == {"expert_files": [str(sft)], "messages_key": "messages", "expert_batch_size": 8}  # ceil(0.2 x 40)
    assert _get(native, "actor.policy_loss.loss_mode") == "mix_chord"
    assert _get(native, "actor.policy_loss.loss_args") == {"mu_warmup_steps": 10, "mu_peak": 0.5, "sft_loss_agg_mode": "token-mean"}
    assert _get(native, "actor.ppo_mini_batch_size") == 8  # (40 - 8 expert rows) / repeat_times 4
    _, report = translate({"algorithm": {"algorithm_type": "mix"}}, "trinity")
    assert any("needs its expert data" in e.reason for e in report.refused if e.key == "algorithm.algorithm_type")


def test_a_stage_without_a_type_keeps_the_base_configs():
    native, _ = translate({"algorithm": {"algorithm_type": "opmd"}, "stages": [{"stage_name": "a", "trainer": {"total_steps": 2}}]}, "trinity")
    assert "algorithm" not in native["stages"][0]
    native, _ = translate({"stages": [{"stage_name": "a", "algorithm": {"algorithm_type": "cispo"}}]}, "trinity")
    assert native["stages"][0]["actor"]["policy_loss"]["loss_mode"] == "cispo"


def test_the_docs_table_lists_every_type_with_its_parts():
    from pathlib import Path

    from posttrain.config.dialects import trinity_algorithms as ta

    doc = (Path(__file__).resolve().parents[2] / "docs" / "foreign-configs.md").read_text()
    rows = {line.split("|")[1].strip(" `"): line for line in doc.splitlines() if line.startswith("| `")}
    for name, t in ta.TYPES.items():
        row = rows[name]
        assert f"| {t.kind} |" in row, name
        if t.kind == "rl":
            assert f"`{ta.ADVANTAGE_FNS[t.advantage_fn][0]}`" in row and f"`{ta.POLICY_LOSS_FNS[t.policy_loss_fn]}`" in row, name
            assert f"| {t.kl_loss_fn} |" in row, name
    assert all(f"| {name} " in doc.replace("`", "") or f"| `{name}` | refused" in doc for name in ta.REFUSED)


def test_modes_bench_and_serve_are_translated():
    native, _ = translate({"mode": "bench", "explorer": {"bench_on_latest_checkpoint": True}}, "trinity")
    assert native["trainer"]["mode"] == "bench" and native["explorer"]["bench_on_latest_checkpoint"] is True
    native, report = translate({"mode": "serve"}, "trinity")
    assert native["trainer"]["mode"] == "serve" and _entry(report, "mode").status == "translated"
