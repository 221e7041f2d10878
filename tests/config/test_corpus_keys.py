"""Keys the published examples use (tests/config/corpus, benchmarks/foreign_corpus.py): translated
where posttrain has the feature, dropped where the source framework does not read them, refused with
the feature that would add them otherwise."""

import pytest

from posttrain.config import load_config
from posttrain.config.dialects import translate
from posttrain.errors import ConfigError


def test_roll_dpo_pipeline_keys_make_a_dpo_config():
    # ROLL's DPO pipeline: loss = (h - 1/(2 beta))^2 with ipo, else the label-smoothed sigmoid loss
    native, report = translate({"pretrain": "m", "ipo": True, "beta": 0.2, "label_smoothing": 0.1,
                                "chosen_key": "good", "rejected_key": "bad",
                                "actor_train": {"training_args": {"num_train_epochs": 3}}}, "roll")
    assert native["trainer"]["total_epochs"] == 3  # the DPO pipeline's passes over the pairs
    assert native["algorithm"]["kind"] == "dpo"
    assert native["algorithm"]["dpo"] == {"loss_type": "ipo", "beta": 0.2, "label_smoothing": 0.1}
    assert (native["data"]["chosen_key"], native["data"]["rejected_key"]) == ("good", "bad")
    assert not report.refused
    native, report = translate({"ipo": False, "beta": 0.1}, "roll")
    assert native["algorithm"]["kind"] == "dpo" and "loss_type" not in native["algorithm"]["dpo"]
    assert report.entry("ipo").status == "dropped"


def test_roll_dynamic_batching_and_ulysses_keys():
    native, report = translate({
        "actor_train": {"use_dynamic_batching_in_train": True, "max_tokens_per_microbatch_in_train": 8192,
                        "sequence_length_round_in_train": 128, "use_dynamic_batching_in_infer": True,
                        "max_tokens_per_microbatch_in_infer": 16384, "model_args": {"flash_attn": "fa2"}},
        "reference": {"use_dynamic_batching_in_infer": True, "max_tokens_per_microbatch_in_infer": 4096},
        "validation": {"eval_steps": 10}, "model_name": "demo-20260101",
    }, "roll")
    assert native["actor"]["use_dynamic_bsz"] is True and native["actor"]["ppo_max_token_len_per_gpu"] == 8192
    assert native["rollout"]["log_prob_use_dynamic_bsz"] is True and native["rollout"]["log_prob_max_token_len_per_gpu"] == 16384
    assert native["ref"]["log_prob_use_dynamic_bsz"] is True and native["ref"]["log_prob_max_token_len_per_gpu"] == 4096
    for key in ("actor_train.sequence_length_round_in_train", "actor_train.model_args.flash_attn", "validation.eval_steps", "model_name"):
        assert report.entry(key).status == "dropped", key
    assert not report.refused


def test_unknown_children_inherit_their_sections_reason():
    # a mapping listed as unsupported names the feature for every key below it, known or not
    _, report = translate({"actor_rollout_ref": {"rollout": {"mtp": {"enable": True, "some_new_key": 1}}}}, "verl")
    (entry,) = report.refused  # one line for the section, whatever keys it holds
    assert entry.key == "actor_rollout_ref.rollout.mtp"
    assert entry.reason.startswith("not supported: the rollout's copy of actor_rollout_ref.model.mtp"), entry
    _, report = translate({"student": {"model_args": {"dtype": "bf16"}}, "kd_objective": "forward_kl"}, "roll")
    # a student role without a teacher is no distillation file (posttrain.config.dialects.roll_distill)
    assert [e.key for e in report.refused] == ["student"] and "distillation pipeline" in report.refused[0].reason


def test_trinity_logprobs_zero_and_display_keys_are_dropped():
    base = {"buffer": {"explorer_input": {"taskset": {"path": "/nonexistent", "rollout_args": {"temperature": 1.0, "logprobs": 0},
                                                      "enable_progress_bar": True}}},
            "trainer": {"enable_preview": True}}
    _, report = translate(base, "trinity")
    for key in ("buffer.explorer_input.taskset.rollout_args.logprobs", "buffer.explorer_input.taskset.enable_progress_bar", "trainer.enable_preview"):
        assert report.entry(key).status == "dropped", key
    base["buffer"]["explorer_input"]["taskset"]["rollout_args"]["logprobs"] = 5  # Trinity keeps the sampled token's only
    _, report = translate(base, "trinity")
    assert report.entry("buffer.explorer_input.taskset.rollout_args.logprobs").status == "dropped"


def test_trinity_taskset_max_tokens_is_the_training_budget_and_validation_shares_it():
    ts, ev = "buffer.explorer_input.taskset.rollout_args.max_tokens", "buffer.explorer_input.eval_tasksets[0].rollout_args.max_tokens"

    def run(train, evaluate, model):
        raw = {"model": model, "buffer": {"explorer_input": {
            "taskset": {"path": "/nonexistent", "rollout_args": {"max_tokens": train}},
            "eval_tasksets": [{"path": "/nonexistent", "rollout_args": {"temperature": 0.6, "max_tokens": evaluate}}]}}}
        native, report = translate(raw, "trinity")
        return native.get("rollout", {}).get("response_length"), report.entry(ts), report.entry(ev)

    # agentscope_websearch: both at model.max_response_tokens (Trinity-RFT's default for either)
    length, train, evaluate = run(4096, 4096, {"max_response_tokens": 4096, "max_model_len": 20480})
    assert length == 4096 and train.status == "translated" and evaluate.status == "dropped"
    length, train, evaluate = run(1024, 1024, {"max_model_len": 4096})  # response derived: 4096 - 4096 // 2
    assert length == 1024 and evaluate.status == "dropped"
    length, train, evaluate = run(1024, 2048, {"max_response_tokens": 2048})  # evaluation's own budget: none here
    assert length == 1024 and evaluate.status == "refused" and "no per-taskset length; set this taskset's max_tokens to 1024" in evaluate.reason
    _, train, _ = run(4096, 4096, {"max_response_tokens": 2048})
    assert train.status == "refused" and "exceed model.max_response_tokens (2048)" in train.reason


def test_verl_keys_that_change_nothing_are_dropped():
    _, report = translate({"trainer": {"use_legacy_worker_impl": "disable"},
                           "actor_rollout_ref": {"actor": {"use_torch_compile": False}, "ref": {"use_torch_compile": False}}}, "verl")
    assert report.entry("trainer.use_legacy_worker_impl").status == "dropped"  # verl's engine workers: posttrain's loss scale
    assert report.entry("actor_rollout_ref.ref.use_torch_compile").status == "dropped"
    # the reference runs the actor's forward: true is verl's own default, left out with the reason;
    # another value than the actor's, when it is not verl's default, is refused
    _, report = translate({"actor_rollout_ref": {"actor": {"use_torch_compile": False}, "ref": {"use_torch_compile": True}}}, "verl")
    entry = report.entry("actor_rollout_ref.ref.use_torch_compile")
    assert entry.status == "dropped" and "verl's own default" in entry.reason


def test_verl_default_that_fails_validation_with_the_users_keys_is_left_out():
    # verl's default use_torch_compile: true compiles helper functions under FSDP; posttrain's compiles
    # the whole forward, which a sharded model cannot run: with 2 processes the default leaves, a
    # user's own true is still refused
    from posttrain.config.dialects import foreign_native

    native = foreign_native("verl", None, ["trainer.n_gpus_per_node=2"])
    assert native.get("actor", {}).get("use_torch_compile") is not True
    # a true written out equals verl's default, and is left out alike (a file cannot tell the two apart)
    native = foreign_native("verl", None, ["trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.use_torch_compile=true"])
    assert native.get("actor", {}).get("use_torch_compile") is not True
    assert foreign_native("verl", None, ["actor_rollout_ref.actor.use_torch_compile=true"])["actor"]["use_torch_compile"] is True


def test_verl_rollout_keys_verl_itself_no_longer_reads_are_dropped():
    # verl 0.8 always wakes weights before the KV cache and cuts no requests, whatever these say
    _, report = translate({"actor_rollout_ref": {"rollout": {"multi_stage_wake_up": True, "over_sample_rate": 0.1}}}, "verl")
    assert not report.refused
    wake = report.entry("actor_rollout_ref.rollout.multi_stage_wake_up")
    over = report.entry("actor_rollout_ref.rollout.over_sample_rate")
    assert wake.status == over.status == "dropped"
    assert "always wake in stages" in wake.reason and "reads it nowhere" in over.reason


def test_verl_qwen_tool_format_is_hermes_calls():
    # verl's older SGLang rollout: format qwen = Hermes <tool_call> JSON, answers in Qwen2.5's framing
    native, report = translate({"actor_rollout_ref": {"rollout": {"multi_turn": {"enable": True, "format": "qwen"}}}}, "verl")
    assert native["rollout"]["multi_turn"]["format"] == "hermes" and not report.refused
    native, _ = translate({"actor_rollout_ref": {"rollout": {"multi_turn": {"format": "chatml"}}}}, "verl")
    assert native["rollout"]["multi_turn"]["format"] == "chatml"  # another framing: left for the schema to refuse


def test_verl_sglang_server_mode_keys_are_dropped():
    # where an older verl ran SGLang (in the worker or behind HTTP) samples the same responses
    rollout = {"name": "sglang", "sglang_rollout_mode": "server", "server": {"timeout": 60, "max_attempts": 3, "retry_delay": 2}}
    _, report = translate({"actor_rollout_ref": {"rollout": rollout}}, "verl")
    assert not report.refused
    assert report.entry("actor_rollout_ref.rollout.sglang_rollout_mode").status == "dropped"
    assert "no HTTP request" in report.entry("actor_rollout_ref.rollout.server").reason


def test_verl_rollout_trace_keys_translate_and_weave_is_refused():
    trace = {"backend": "mlflow", "token2text": True, "max_samples_per_step_per_worker": 3}
    native, report = translate({"actor_rollout_ref": {"rollout": {"trace": trace}}}, "verl")
    assert native["rollout"]["trace"] == trace and not report.refused
    with pytest.raises(ConfigError, match="rollout.trace.backend=weave: posttrain writes rollout traces to MLflow"):
        load_config(None, ["rollout.trace.backend=weave"])
