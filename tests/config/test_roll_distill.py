"""ROLL's distillation pipeline files load as a posttrain distillation stage
(posttrain.config.dialects.roll_distill).

The file below copies the key set of ROLL's qwen2.5-7B-distill_megatron example with small values;
the real files are planned by the corpus sweep (benchmarks/foreign_corpus.py).
"""

from __future__ import annotations

import copy
import math

from posttrain.config.dialects import Foreign, check, detect, translate

_TEACHER = {
    "model_args": {"attn_implementation": "fa2", "disable_gradient_checkpointing": True, "dtype": "bf16"},
    "data_args": {"template": "qwen2_5"}, "training_args": {"per_device_train_batch_size": 8},
    "strategy_args": {"strategy_name": "megatron_infer", "strategy_config": {"tensor_model_parallel_size": 2, "bf16": True}},
    "use_sequence_packing": True, "device_mapping": "list(range(0,8))",
}
FILE = {
    "hydra": {"run": {"dir": "."}, "output_subdir": None},
    "exp_name": "distill", "seed": 42, "output_dir": "./output", "num_gpus_per_node": 8,
    "save_steps": 100, "logging_steps": 1, "eval_steps": 50, "resume_from_checkpoint": False,
    "student_pretrain": "Qwen/Qwen2.5-7B-Instruct", "teacher_pretrain": "Qwen/Qwen2.5-14B-Instruct",
    "logits_topk": 64, "distill_loss_weight": 0.85, "kd_objective": "forward_kl", "distill_on_prompt": False,
    "logits_transfer_backend": "nccl-only", "sequence_length": 2048, "max_grad_norm": 1.0,
    "question_key": "question_zh", "answer_key": "answer_zh",
    "validation": {"data_args": {"file_name": ["data/val.json"], "template": "qwen2_5"}},
    "student": {
        "model_args": {"attn_implementation": "fa2", "disable_gradient_checkpointing": False, "dtype": "bf16", "model_type": None},
        "training_args": {"learning_rate": 2.0e-5, "lr_scheduler_type": "constant", "per_device_train_batch_size": 8,
                          "gradient_accumulation_steps": 4, "warmup_steps": 0, "num_train_epochs": 1},
        "data_args": {"template": "qwen2_5", "file_name": ["data/train.json"], "preprocessing_num_workers": 16},
        "strategy_args": {"strategy_name": "megatron_train", "strategy_config": {"tensor_model_parallel_size": 2, "sequence_parallel": True}},
        "use_sequence_packing": True, "device_mapping": "list(range(0,8))", "infer_batch_size": 2,
    },
    "teacher": _TEACHER,
}


def _read(**changes):
    raw = copy.deepcopy(FILE)
    for key, value in changes.items():
        node = raw
        *parents, last = key.split(".")
        for part in parents:
            node = node[part]
        if value is None:
            node.pop(last)
        else:
            node[last] = value
    assert detect(raw) == "roll"
    return translate(raw, "roll")


def test_the_example_reads_as_a_distillation_stage_with_roll_s_settings():
    native, report = _read()
    assert not report.refused, [e.line() for e in report.refused]
    assert check(Foreign(None, "roll", native, report)) == []
    assert native["algorithm"] == {"kind": "distill", "distill": {
        "teacher_path": "Qwen/Qwen2.5-14B-Instruct", "objective": "forward_kl", "weight": 0.85, "topk": 64, "on_prompt": False}}
    assert native["model"]["path"] == "Qwen/Qwen2.5-7B-Instruct"
    data = native["data"]
    assert (data["prompt_key"], data["response_key"], data["max_length"], data["truncation"], data["shuffle"]) == (
        "question_zh", "answer_zh", 2048, "right", True)
    # 8 rows x 4 accumulation steps x 4 data-parallel ranks (8 devices / TP 2)
    assert data["train_batch_size"] == 128 and native["actor"]["ppo_micro_batch_size_per_gpu"] == 8
    assert native["trainer"]["val_before_train"] is False and native["trainer"]["test_freq"] == 50
    dropped = {e.key for e in report.entries if e.status == "dropped"}
    assert {"logits_transfer_backend", "teacher.device_mapping", "teacher.model_args.dtype", "student.infer_batch_size"} <= dropped
    assert any(e.key == "student.training_args.learning_rate" for e in report.entries)  # named as the file wrote it


def test_roll_s_defaults_fill_what_the_file_leaves_out():
    native, report = _read(question_key=None, answer_key=None, max_grad_norm=None, logits_topk=None, kd_objective=None)
    assert not report.refused, [e.line() for e in report.refused]
    assert (native["data"]["prompt_key"], native["data"]["response_key"]) == ("question", "answer")
    assert math.isinf(native["actor"]["grad_clip"])  # DistillConfig's max_grad_norm 0: no clipping
    assert "topk" not in native["algorithm"]["distill"]  # posttrain's default is ROLL's: 64, forward_kl


def test_role_paths_replace_the_pretrain_keys_only_when_both_are_set():
    native, _ = _read(**{"teacher.model_args.model_name_or_path": "/t", "student.model_args.model_name_or_path": "/s"})
    assert (native["model"]["path"], native["algorithm"]["distill"]["teacher_path"]) == ("/s", "/t")
    native, _ = _read(**{"teacher.model_args.model_name_or_path": "/t"})  # the student's is null: ROLL uses both *_pretrain
    assert native["algorithm"]["distill"]["teacher_path"] == "Qwen/Qwen2.5-14B-Instruct"


def test_a_teacher_setting_posttrain_cannot_honour_is_refused_by_name():
    _, report = _read(**{"teacher.model_args.dtype": "fp32"})
    assert [e.key for e in report.refused] == ["teacher.model_args.dtype"]
    assert "student's dtype" in report.refused[0].reason
    _, report = _read(**{"teacher.model_args.lora_rank": 8})
    assert [e.key for e in report.refused] == ["teacher.model_args.lora_rank"]


# ROLL's on-policy distillation example (qwen3-8B-onpolicy-distill-megatron) with small values, without
# its sequence packing (refused for every ROLL RL file, a separate matter).
ONPOLICY = {
    "exp_name": "opd", "seed": 42, "num_gpus_per_node": 8, "max_steps": 4, "rollout_batch_size": 16, "prompt_length": 64,
    "response_length": 32, "num_return_sequences_in_group": 4, "ppo_epochs": 1, "adv_estimator": "reinforce",
    "pretrain": "Qwen/Qwen3-8B", "reward_pretrain": "Qwen/Qwen3-8B", "global_template": "qwen3",
    "validation": {"data_args": {"file_name": ["data/val.jsonl"]}, "generating_args": {"max_new_tokens": 32, "temperature": 0.6}},
    "student_train": {"model_args": {"dtype": "bf16"},
                      "training_args": {"learning_rate": 5.0e-7, "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1},
                      "data_args": {"file_name": ["data/train.jsonl"], "messages": "messages"},
                      "strategy_args": {"strategy_name": "megatron_train", "strategy_config": {"tensor_model_parallel_size": 1}},
                      "device_mapping": "list(range(0,8))", "infer_batch_size": 4},
    "student_infer": {"model_args": {"dtype": "bf16"}, "generating_args": {"max_new_tokens": 32, "temperature": 0.99,
                                                                         "num_return_sequences": 4},
                      "strategy_args": {"strategy_name": "vllm", "strategy_config": {"gpu_memory_utilization": 0.8}},
                      "device_mapping": "list(range(0,8))"},
    "teacher": {"model_args": {"model_name_or_path": "Qwen/Qwen3-32B", "dtype": "bf16"},
                "strategy_args": {"strategy_name": "megatron_infer", "strategy_config": {"tensor_model_parallel_size": 2}},
                "device_mapping": "list(range(0,8))", "infer_batch_size": 1},
    "rewards": {"math_rule": {"worker_cls": "roll.pipeline.rlvr.rewards.math_rule_reward_worker.MathRuleRewardWorker",
                              "tag_included": ["math_dapo"], "world_size": 8}},
}


def _onpolicy(**changes):
    raw = copy.deepcopy(ONPOLICY)
    for key, value in changes.items():
        node = raw
        *parents, last = key.split(".")
        for part in parents:
            node = node[part]
        node[last] = value
    return translate(raw, "roll")


def test_on_policy_distillation_reads_as_rl_with_the_teacher_as_reference():
    native, report = _onpolicy(**{"teacher.opd_kl_coef": 0.5})
    assert not report.refused, [e.line() for e in report.refused]
    assert check(Foreign(None, "roll", native, report)) == []
    assert native["algorithm"]["adv_estimator"] == "on_policy_distill"
    assert native["algorithm"]["adv_estimator_args"] == {"kl_coef": 0.5}
    assert native["ref"]["model_path"] == "Qwen/Qwen3-32B" and native["actor"]["use_kl_loss"] is False
    keys = {e.key for e in report.entries}
    assert {"student_train.training_args.learning_rate", "teacher.model_args.dtype", "adv_estimator"} <= keys


def test_roll_s_opd_advantage_is_posttrain_s_on_policy_distill():
    import torch

    from posttrain.algorithms import on_policy_distill_advantage

    student, teacher, mask = torch.tensor([[-1.0, -2.0, -0.5]]), torch.tensor([[-0.5, -3.0, -0.5]]), torch.tensor([[1.0, 1.0, 0.0]])
    roll_advantage = -0.5 * (student - teacher) * mask  # ROLL: -opd_kl_coef x k1 KL, masked
    ours = on_policy_distill_advantage(response_mask=mask, old_logprobs=student, ref_logprobs=teacher, kl_coef=0.5)
    assert torch.allclose(ours.advantages, roll_advantage)


def test_what_posttrain_s_single_teacher_cannot_do_is_refused():
    _, report = _onpolicy(kl_penalty="k3")
    assert [e.key for e in report.refused] == ["kl_penalty"]
    _, report = _onpolicy(**{"teacher.tag_included": ["math_dapo"]})
    assert [e.key for e in report.refused] == ["teacher.tag_included"]
    assert "ref.teachers with this one teacher" in report.refused[0].reason


def _teacher(path, **more):
    return {**copy.deepcopy(ONPOLICY["teacher"]), "model_args": {"model_name_or_path": path, "dtype": "bf16"}, **more}


def test_several_teachers_read_as_ref_teachers_with_their_tags_and_coefficients():
    native, report = _onpolicy(teacher={"math": _teacher("/t32", tag_included=["math_dapo"], opd_kl_coef=0.5),
                                        "code": _teacher("/t14", tag_included=["KodCode"]), "all": _teacher("/t7")})
    assert not report.refused, [e.line() for e in report.refused]
    assert check(Foreign(None, "roll", native, report)) == []
    assert native["ref"]["teachers"] == {"math": {"model_path": "/t32", "kl_coef": 0.5, "tag_included": ["math_dapo"]},
                                         "code": {"model_path": "/t14", "kl_coef": 1.0, "tag_included": ["KodCode"]},
                                         "all": {"model_path": "/t7", "kl_coef": 1.0, "tag_included": []}}
    assert "model_path" not in native["ref"] and "kl_coef" not in native["algorithm"].get("adv_estimator_args", {})
    assert native["ref"]["log_prob_micro_batch_size_per_gpu"] == 1  # the teachers' shared infer_batch_size
    keys = {e.key for e in report.entries}
    assert {"teacher.math.tag_included", "teacher.code.model_args.model_name_or_path", "teacher.all.infer_batch_size",
            "student_train.training_args.learning_rate"} <= keys


def test_teachers_without_a_model_or_with_different_shared_settings_are_refused():
    _, report = _onpolicy(teacher={"a": _teacher("/a"), "b": {**_teacher("/b"), "model_args": {"dtype": "bf16"}}})
    assert [e.key for e in report.refused] == ["teacher.b.model_args.model_name_or_path"]
    _, report = _onpolicy(teacher={"a": _teacher("/a"), "b": _teacher("/b", infer_batch_size=2)})
    assert [e.key for e in report.refused] == ["teacher.b"]
    assert "ref.log_prob_micro_batch_size_per_gpu" in report.refused[0].reason and "same values" in report.refused[0].reason


def test_a_teacher_mapping_with_one_named_teacher_reads_as_the_single_teacher():
    # ROLL normalises a single teacher to {"default": config}: one named teacher is the same run
    named, report = _onpolicy(teacher={"t32": {**ONPOLICY["teacher"], "opd_kl_coef": 0.25}})
    single, _ = _onpolicy(**{"teacher.opd_kl_coef": 0.25})
    assert not report.refused, [e.line() for e in report.refused]
    assert named == single
    keys = {e.key for e in report.entries}
    assert {"teacher.t32.model_args.model_name_or_path", "teacher.t32.opd_kl_coef", "teacher.t32.model_args.dtype"} <= keys
    assert not any(k.startswith(("teacher.model_args", "reference.")) for k in keys)
    # limited to some tags it is still refused, by its name
    _, report = _onpolicy(teacher={"t32": {**ONPOLICY["teacher"], "tag_included": ["math_dapo"]}})
    assert [e.key for e in report.refused] == ["teacher.t32.tag_included"]


def test_the_students_context_parallelism_is_dropped_not_split():
    native, report = _read(**{"student.strategy_args.strategy_config": {"tensor_model_parallel_size": 2, "context_parallel_size": 2}})
    assert not report.refused and "ulysses_sequence_parallel_size" not in native.get("actor", {})
    assert report.entry("student.strategy_args.strategy_config.context_parallel_size").status == "dropped"
    assert native["data"]["train_batch_size"] == 64  # 8 x 4 x 2 data-parallel ranks (8 devices / TP 2 x CP 2), as ROLL counts


VL = {"student.data_args.template": "qwen2-vl", "teacher.data_args.template": "qwen2-vl"}


def test_the_vision_language_distillation_file_reads_its_fixed_columns_and_image_bounds():
    """ROLL's distill_vl_fsdp2 / distill_vl_megatron examples (student template qwen2-vl): the VL
    pipeline's columns, question suffix, pixel bounds, every token trained, rows padded to
    prompt_length and never cut, no validation; the text pipeline's keys it does not read are dropped."""
    native, report = _read(**VL)
    assert not report.refused, [e.line() for e in report.refused]
    assert check(Foreign(None, "roll", native, report)) == []
    data = native["data"]
    assert (data["prompt_key"], data["response_key"], data["image_key"]) == ("problem", "solution", "image")
    assert data["user_suffix"] == "  Output final answer (number) in <answer> </answer> tags."
    assert (data["image_max_pixels"], data["image_min_pixels"]) == (1024 * 1024, 56 * 56)
    assert (data["max_length"], data["truncation"], data["shuffle"], data["sft_trim_final_newline"]) == (1024, "error", True, True)
    assert "val_files" not in data and "chat_template_name" not in data
    assert native["algorithm"]["distill"]["on_prompt"] is True  # the file says False: the VL pipeline trains every token
    assert report.entry("distill_on_prompt").native == "algorithm.distill.on_prompt"
    assert "val_before_train" not in native.get("trainer", {}) and "test_freq" not in native.get("trainer", {})
    dropped = {e.key for e in report.entries if e.status == "dropped"}
    assert {"student.data_args.template", "teacher.data_args.template", "question_key", "answer_key", "sequence_length",
            "validation", "eval_steps", "student.infer_batch_size"} <= dropped
    # the rest is the text pipeline's: batch, losses, teacher
    assert data["train_batch_size"] == 128 and native["algorithm"]["distill"]["weight"] == 0.85
    assert native["algorithm"]["distill"]["teacher_path"] == "Qwen/Qwen2.5-14B-Instruct"
    native, _ = _read(**VL, prompt_length=4096)
    assert native["data"]["max_length"] == 4096
    text, _ = _read()  # the text pipeline's file is read as before
    assert "image_key" not in text["data"] and text["data"]["truncation"] == "right" and text["data"]["prompt_key"] == "question_zh"


def test_the_launchers_opd_switches_are_read():
    _, report = _onpolicy(is_pure_opd=True, pure_opd_pipeline_type="rlvr")
    assert not report.refused and report.entry("is_pure_opd").status == "dropped"
    _, report = _onpolicy(pure_opd_pipeline_type="agentic")
    assert [e.key for e in report.refused] == ["pure_opd_pipeline_type"]
    _, report = translate({"use_opd": True}, "roll")
    assert "mixed on-policy distillation" in report.entry("use_opd").reason
