"""`posttrain smoke`: real verl / ROLL / Trinity-RFT configs (tests/config/corpus) run 2 steps here,
with only what this machine lacks substituted (posttrain.trainer.smoke)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml
from transformers import AutoConfig

from posttrain.cli import main
from posttrain.config.dialects.launch_script import launch_words
from posttrain.models.tiny import make_tiny_model
from posttrain.trainer.smoke import machine_refusal
from posttrain.trainer.smoke_model import tiny_like

CORPUS = Path(__file__).resolve().parents[1] / "config" / "corpus"


def test_machine_refusals_are_only_the_machines():
    assert machine_refusal("not implemented yet: vLLM/SGLang rollout engines (later issue)")
    assert machine_refusal("not supported: Megatron parallelism is not provided: posttrain shards actor with FSDP")
    assert machine_refusal("roles on different devices (actor_train 0..15; actor_infer 0..11) is a split placement: ...")
    assert machine_refusal("'/data/gsm8k' is neither a local file, a folder nor a Hugging Face dataset name; posttrain reads local files")
    assert not machine_refusal("not implemented yet: file-weighted sampling (later issue)")
    assert not machine_refusal("not implemented yet: multi-turn tool calling (agentic issue 15)")
    # a Megatron option that changes the numbers is not the machine's (posttrain.config.dialects.verl_megatron)
    assert not machine_refusal("not supported: Megatron's MoE load-balancing loss: posttrain's actor loss has no balancing term")
    assert machine_refusal("not supported: Megatron backends are not provided: posttrain runs actor with torch")
    # a ModelScope model name whose files are not in this machine's ModelScope cache: the tiny model stands in
    assert machine_refusal("model path 'Qwen/Qwen3-8B' is not an existing local directory, nor a model the local ModelScope cache "
                           "(/root/.cache/modelscope/hub, $MODELSCOPE_CACHE) holds. posttrain never downloads models at run time")


def test_tiny_model_of_the_users_family(tmp_path):
    user = make_tiny_model(tmp_path / "user", layers=3, hidden=128, heads=4)  # stands for a local checkpoint
    out, how = tiny_like(str(user), tmp_path / "tiny")
    config = AutoConfig.from_pretrained(out)
    assert (config.model_type, config.num_hidden_layers, config.hidden_size) == ("qwen2", 2, 64)
    assert how.startswith("a tiny random qwen2 model") and "user's tokenizer" in how
    out, how = tiny_like("Org/not-in-any-cache", tmp_path / "default")
    assert how == "posttrain's default tiny model (no config.json of it on this machine)"
    assert (out / "config.json").is_file()
    for name, family in (("Qwen/Qwen2.5-VL-3B-Instruct", "qwen2_5_vl"), ("Qwen/Qwen2-VL-2B-Instruct", "qwen2_vl")):
        out, how = tiny_like(name, tmp_path / family)  # a vision-language name not here: the tiny model of its family
        assert AutoConfig.from_pretrained(out).model_type == family and how.startswith(f"posttrain's tiny {family} model")
        assert (out / "preprocessor_config.json").is_file()


def metrics(workdir: Path) -> list[dict]:
    lines = (workdir / "run" / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if '"step"' in line]


def test_smoke_a_verl_launch_script_with_its_first_data_rows(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rows = tmp_path / "gsm8k.jsonl"  # the user's data, here: the smoke run reads its first rows
    rows.write_text("".join(json.dumps({"prompt": [{"role": "user", "content": f"{i} + {i} = ?"}], "data_source": "posttrain/arithmetic",
                                        "reward_model": {"ground_truth": str(2 * i)}}) + "\n" for i in range(10)))
    words = launch_words((CORPUS / "verl/grpo_trainer/run_qwen2-7b.sh").read_text(), {"HOME": "/nonexistent"})
    # verl's default use_torch_compile would compile the tiny model's forward with inductor: seconds of
    # C++ compilation per test run for nothing this test checks, so the line turns it off as a user may
    rc = main(["smoke", "--workdir", str(tmp_path / "w"), "--dialect", "verl", *words, f"data.train_files={rows}",
               "actor_rollout_ref.actor.use_torch_compile=false"])
    out = capsys.readouterr().out
    assert rc == 0, out
    for line in ("rollout.name: vllm -> hf (the HF engine)",
                 'cluster: {"nnodes": 1, "n_gpus_per_node": 8} -> one CPU process',
                 "model.path: Qwen/Qwen2-7B-Instruct -> posttrain's default tiny model",
                 "data.train_files: ", "-> its first 4 rows", "data.val_files: ", "-> 2 synthetic rows",
                 "data.train_batch_size: 1024 -> 2", "rollout.n: 5 -> 2", "trainer.logger: ['console', 'wandb'] -> ['console', 'jsonl']"):
        assert line in out, line
    assert "ran 2 steps here" in out
    steps = metrics(tmp_path / "w")
    assert [m["step"] for m in steps if "actor/pg_loss" in m] == [1, 2]
    train = [json.loads(r) for r in (tmp_path / "w" / "data" / "train_files.jsonl").read_text().splitlines()]
    assert [r["reward_model"]["ground_truth"] for r in train] == ["0", "2", "4", "6"]


def test_smoke_a_roll_dpo_config(tmp_path, capsys):
    config = str(CORPUS / "roll/dpo_examples/qwen2.5-3B_dpo_megatron.yaml")
    # its logging_dir (the cluster's folder for the per-process logs) moves under the smoke folder
    rc = main(["smoke", "--workdir", str(tmp_path / "w"), "--dialect", "roll", config])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "strategy_name" not in out  # megatron_train / megatron_infer translate onto FSDP2: nothing to substitute
    assert "trainer.tracker_kwargs: " in out  # its TensorBoard folder is the cluster's
    assert not Path("/data/oss_bucket_0").exists()
    assert len([m for m in metrics(tmp_path / "w") if "step" in m]) >= 2


def test_smoke_a_roll_sft_config(tmp_path, capsys):
    # ROLL's SFT pipeline file: an SFT stage on rows with its instruction / input / output columns
    config = str(CORPUS / "roll/qwen2.5-7B-sft_megatron/sft_config.yaml")
    rc = main(["smoke", "--workdir", str(tmp_path / "w"), config])
    out = capsys.readouterr().out
    assert rc == 0, out
    rows = [json.loads(line) for line in open(tmp_path / "w" / "data" / "train_files.jsonl")]
    assert {"instruction", "input", "output"} <= set(rows[0]) and isinstance(rows[0]["instruction"], str)
    steps = [m for m in metrics(tmp_path / "w") if "sft/loss" in m]
    assert len(steps) == 2 and steps[1]["actor/lr"] < steps[0]["actor/lr"]  # ROLL's default linear decay


def test_smoke_a_trinity_config(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TRINITY_TASKSET_PATH", raising=False)
    monkeypatch.delenv("TRINITY_MODEL_PATH", raising=False)
    config = str(CORPUS / "trinity/grpo_gsm8k/gsm8k.yaml")
    # its math_workflow scores with think_answer (accuracy + format); a short system prompt of the
    # taskset's own stands in for the R1 template (tests/config/test_trinity_math.py) to keep prompts
    # short, and the evaluation taskset, which would still get the R1 template, is left out
    rc = main(["smoke", "--workdir", str(tmp_path / "w"), "--dialect", "trinity", config,
               "buffer.explorer_input.taskset.format.system_prompt=Think then answer.", "~buffer.explorer_input.eval_tasksets"])
    out = capsys.readouterr().out
    assert rc == 0, out
    # Trinity's 2 devices: a trainer on one and the engine on the other (a split placement), here one CPU process
    assert 'cluster: {"nnodes": 1, "n_gpus_per_node": 2, "device_mapping": {"a... -> one CPU process' in out
    assert "rollout.n: 8 -> 2" in out and "data.train_files: " in out
    steps = [m for m in metrics(tmp_path / "w") if "actor/pg_loss" in m]
    assert [m["step"] for m in steps] == [1, 2]
    assert all("reward/format_score" in m and "reward/accuracy" in m for m in steps)  # the scorer's two parts


# The taskset of Trinity-RFT's grpo_math example: math_rm_workflow scored by RM-Gallery's math_verify_reward
MATH_RM = """\
algorithm: {{algorithm_type: grpo, repeat_times: 8}}
model: {{model_path: /nonexistent/model, max_response_tokens: 3072}}
cluster: {{node_num: 1, gpu_per_node: 8}}
buffer:
  batch_size: 288
  explorer_input:
    taskset:
      path: {path}
      format: {{prompt_key: question, response_key: gt_answer}}
      reward_fn_args: {{reward_name: math_verify_reward}}
      default_workflow_type: math_rm_workflow
      default_reward_fn_type: rm_gallery_reward
"""


def test_smoke_trinitys_math_rm_workflow(tmp_path, capsys):
    for kind, answer in (("text", str), ("numbers", int)):
        rows = tmp_path / f"{kind}.jsonl"
        rows.write_text("".join(json.dumps({"question": f"What is {i} + 3?", "gt_answer": answer(i + 3)}) + "\n" for i in range(4)))
        config = tmp_path / f"{kind}.yaml"
        config.write_text(MATH_RM.format(path=rows))
        rc = main(["smoke", "--workdir", str(tmp_path / kind), "--dialect", "trinity", str(config)])
        out, err = capsys.readouterr()
        if kind == "text":
            assert rc == 0, out + err
            steps = [m for m in metrics(tmp_path / kind) if "actor/pg_loss" in m]
            assert [m["step"] for m in steps] == [1, 2]
            # every response scored by math_verify_first (its part logged under RM-Gallery's name), none failed
            assert all(m["reward/math_verify"] == m["critic/score/mean"] and m["reward/failures"] == 0 for m in steps)
        else:  # the row's gt_answer reaches the scorer, which (as RM-Gallery) reads only text
            assert rc != 0 and "the ground truth 3 is not text" in err and "math_verify_first" in err


def test_smoke_config_substitutes_an_npu_profiler_and_out_of_run_steps(tmp_path):
    from posttrain.trainer.smoke import smoke_config

    path, lines = smoke_config(None, ["global_profiler.tool=npu", "global_profiler.steps=[2,4]", "trainer.total_training_steps=10",
                                      "actor_rollout_ref.model.path=/nonexistent/model",
                                      "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2", "trainer.n_gpus_per_node=2",
                                      "actor_rollout_ref.rollout.trace.backend=mlflow"], "verl", tmp_path)
    assert "actor.ulysses_sequence_parallel_size: 2 -> 1 (one process splits no sequence)" in lines
    assert "rollout.trace.backend: mlflow -> None (no remote trackers here)" in lines
    assert "profiler.tool: npu -> torch (no NPU here: torch's profiler traces the same steps)" in lines
    assert "profiler.steps: [2, 4] -> [2] (the smoke run has 2 steps)" in lines
    assert "trainer.total_training_steps: 10 -> 2" in lines
    import yaml

    written = yaml.safe_load(path.read_text())
    assert written["profiler"]["tool"] == "torch" and written["cluster"]["n_gpus_per_node"] == 0
    assert written["actor"]["ulysses_sequence_parallel_size"] == 1
    assert written["trainer"]["default_local_dir"] == str(tmp_path / "run")


def test_smoke_config_gives_a_reward_model_and_its_input_tokenizer_the_tiny_model(tmp_path):
    """verl's reward model (its reward loop re-renders with the policy's tokenizer): both paths are
    the tiny model's."""
    from posttrain.trainer.smoke import smoke_config
    import yaml

    path, lines = smoke_config(None, ["actor_rollout_ref.model.path=/nonexistent/model", "reward_model.enable=True",
                                      "reward_model.model.path=/nonexistent/rm", "data.return_raw_chat=True"], "verl", tmp_path)
    assert "reward.reward_model.input_tokenizer: /nonexistent/model -> the same tiny model" in lines
    rm = yaml.safe_load(path.read_text())["reward"]["reward_model"]
    assert rm["path"] == rm["input_tokenizer"] == yaml.safe_load(path.read_text())["model"]["path"]


def test_smoke_config_gives_an_llm_judge_the_tiny_model(tmp_path):
    from posttrain.trainer.smoke import smoke_config
    import yaml

    judge = "roll.pipeline.rlvr.rewards.llm_judge_reward_worker.LLMJudgeRewardWorker"
    config = tmp_path / "rlvr.yaml"
    config.write_text(yaml.safe_dump({
        "pretrain": "/nonexistent/policy", "rollout_batch_size": 8,
        "rewards": {"judge": {"worker_cls": judge, "tag_included": ["qa"], "data_args": {"template": "qwen2_5"},
                              "model_args": {"model_name_or_path": "/nonexistent/judge"},
                              "strategy_args": {"strategy_name": "vllm", "strategy_config": {"gpu_memory_utilization": 0.8, "load_format": "auto"}}}}}))
    path, lines = smoke_config(str(config), [], "roll", tmp_path / "w")
    assert "reward.workers.judge.model_args.model_name_or_path: /nonexistent/judge -> the same tiny model (a random judge)" in lines
    assert "reward.workers.judge.engine.name: vllm -> hf (the HF engine judges here)" in lines
    assert any(line.startswith("reward.on_error: raise -> fixed") for line in lines)
    written = yaml.safe_load(path.read_text())
    worker = written["reward"]["workers"]["judge"]
    assert worker["model_args"]["model_name_or_path"] == written["model"]["path"] and worker["chat_template_name"] == "qwen2_5"
    assert worker["engine"] == {"name": "hf", "gpu_memory_utilization": 0.8}  # the vLLM option kept, noted unused by the hf judge
    assert written["reward"]["on_error"] == "fixed"


def test_smoke_rows_give_every_reward_workers_domain_rows(tmp_path):
    from posttrain.trainer.smoke import smoke_config
    import json
    import yaml

    math = "roll.pipeline.rlvr.rewards.math_rule_reward_worker.MathRuleRewardWorker"
    config = tmp_path / "rlvr.yaml"
    workers = {name: {"worker_cls": math, "tag_included": [f"{name}_tag", "other"]} for name in ("a", "b", "c", "d", "e")}
    config.write_text(yaml.safe_dump({
        "pretrain": "/nonexistent/policy", "rollout_batch_size": 8, "rewards": workers,
        "actor_train": {"data_args": {"file_name": ["/nonexistent/train.jsonl"],
                                      "domain_interleave_probs": {name: 0.2 for name in workers}}}}))
    path, lines = smoke_config(str(config), [], "roll", tmp_path / "w")
    written = yaml.safe_load(path.read_text())
    rows = [json.loads(line) for line in open(written["data"]["train_files"][0])]
    # 5 domains drawn by data.domain_interleave_probs: a row of each, more than the 4 the 2 steps need
    assert sorted({r["data_source"] for r in rows}) == [f"{name}_tag" for name in "abcde"] and len(rows) == 5


def test_smoke_config_serves_the_tiny_model_as_each_auxiliary_model(tmp_path):
    from posttrain.trainer.smoke import smoke_config
    import yaml

    config = tmp_path / "judged.yaml"
    config.write_text(yaml.safe_dump({"model": {"path": "/nonexistent/policy"}, "data": {"train_files": ["/nonexistent/t.jsonl"], "extra_info_keys": ["rubric"]},
                                      "reward": {"auxiliary_models": {"judge": {"model_path": "/nonexistent/judge", "engine": {"name": "vllm"}}}}}))
    path, lines = smoke_config(str(config), [], None, tmp_path / "w")
    assert "reward.auxiliary_models.judge.model_path: /nonexistent/judge -> the same tiny model (a random judge)" in lines
    written = yaml.safe_load(path.read_text())
    judge = written["reward"]["auxiliary_models"]["judge"]
    assert judge["model_path"] == written["model"]["path"] and judge["engine"]["name"] == "hf"
    import json

    rows = [json.loads(line) for line in open(written["data"]["train_files"][0])]
    assert all(r["rubric"][0]["description"] for r in rows)  # a synthetic rubric column for a rubric_judge


def test_smoke_config_generates_in_place_of_a_replay_and_dumps_under_its_folder(tmp_path):
    from posttrain.trainer.smoke import smoke_config

    base = ["model.path=/nonexistent/model", "trainer.rollout_mock_dir=/data/dumps"]
    _, lines = smoke_config(None, [*base, "trainer.rollout_mock=replay"], None, tmp_path / "a")
    assert "trainer.rollout_mock: replay -> None (the tiny model generates; /data/dumps's rollouts are the real model's)" in lines
    _, lines = smoke_config(None, [*base, "trainer.rollout_mock=dump"], None, tmp_path / "b")
    assert f"trainer.rollout_mock_dir: /data/dumps -> {tmp_path / 'b' / 'out' / 'rollout_mock_dir'}" in lines


def test_smoke_substitutes_device_counts_a_scripts_unset_variables_left_empty(tmp_path):
    # test_gspo_3b_math.sh outside a SLURM job: NNODES=${SLURM_JOB_NUM_NODES}; trainer.nnodes="${NNODES}"
    from posttrain.config.dialects.launch_script import extract
    from posttrain.config.dialects.verl import BLANK_DEVICES
    from posttrain.config.load import load_config
    from posttrain.trainer.smoke import smoke_config

    script = ("NNODES=${SLURM_JOB_NUM_NODES}\nexport NNODES\npython3 -m verl.trainer.main_ppo \\\n"
              "  algorithm.adv_estimator=grpo trainer.nnodes=\"${NNODES}\" trainer.n_gpus_per_node=$GPUS \\\n"
              "  actor_rollout_ref.actor.ulysses_sequence_parallel_size=4 $@\n")
    found = extract(script, {})
    assert found.words == ["algorithm.adv_estimator=grpo", "trainer.nnodes=", "trainer.n_gpus_per_node=",
                           "actor_rollout_ref.actor.ulysses_sequence_parallel_size=4"]
    assert found.blank_notes() == [
        "trainer.nnodes is empty: $SLURM_JOB_NUM_NODES is not set; SLURM sets it inside a job: export it to plan here",
        "trainer.n_gpus_per_node is empty: $GPUS is not set: export it to plan here"]
    assert machine_refusal(BLANK_DEVICES)
    config, lines = smoke_config(None, found.words, "verl", tmp_path / "w")
    assert 'trainer.nnodes: "" -> left out (one CPU process here)' in lines
    assert 'trainer.n_gpus_per_node: "" -> left out (one CPU process here)' in lines
    # a size that must divide the unknown process count is the cluster's to judge: one process here
    assert "actor.ulysses_sequence_parallel_size: 4 -> 1 (one process splits no sequence)" in lines
    cfg = load_config(str(config))
    assert (cfg.cluster.nnodes, cfg.cluster.n_gpus_per_node, cfg.cluster.device) == (1, 0, "cpu")


def test_smoke_config_gives_a_distillation_teacher_the_tiny_model(tmp_path):
    """The teacher reads the policy's token ids: the distillation stage's and a reference role's
    (on-policy distillation) become the tiny model too."""
    from posttrain.trainer.smoke import smoke_config
    import yaml

    (tmp_path / "distill.yaml").write_text("model: {path: /nonexistent/model}\nref: {model_path: /nonexistent/ref}\n"
                                           "algorithm: {kind: distill, distill: {teacher_path: /nonexistent/teacher}}\n")
    path, lines = smoke_config(tmp_path / "distill.yaml", [], None, tmp_path / "out")
    assert "algorithm.distill.teacher_path: /nonexistent/teacher -> the same tiny model" in lines
    written = yaml.safe_load(path.read_text())
    assert written["algorithm"]["distill"]["teacher_path"] == written["ref"]["model_path"] == written["model"]["path"]


def test_smoke_rows_of_a_detection_worker_hold_boxes_and_their_weights(tmp_path):
    from posttrain.trainer.smoke import smoke_config
    from posttrain.rewards.detection import detection_score
    import json
    import yaml

    config = tmp_path / "vl.yaml"
    config.write_text(yaml.safe_dump({
        "pretrain": "/nonexistent/policy", "rollout_batch_size": 8,
        "rewards": {"cv_detection": {"worker_cls": "roll.pipeline.rlvr.rewards.detection_reward_worker.DetectionRewardWorker",
                                     "tag_included": ["coco"]}},
        "actor_train": {"data_args": {"file_name": ["/nonexistent/train.parquet"]}}}))
    path, _ = smoke_config(str(config), [], "roll", tmp_path / "w")
    written = yaml.safe_load(path.read_text())
    assert written["data"]["extra_info_keys"] == ["reward_model"]
    row = json.loads(open(written["data"]["train_files"][0]).readline())
    truth = row["reward_model"]["ground_truth"]  # not overwritten by a synthetic extra_info column
    reply = "<think>.</think>\n<answer>\n[{'bbox_2d': [10, 10, 50, 50], 'label': 'box'}]\n</answer>"
    assert row["data_source"] == "coco" and detection_score("coco", reply, truth, {"reward_model": row["reward_model"]})["score"] == 1.0


# Trinity-RFT's grpo_gsm8k_trainable_ruler example: the policy judges its own groups (reward.self_judge),
# GRPO's std_threshold filters groups (dynamic sampling), and the explorer drives the synchronizer
TRAINABLE_RULER = """\
algorithm: {algorithm_type: grpo, repeat_times: 8, optimizer: {lr: 2e-6}, advantage_fn_args: {std_threshold: 0.0001}}
model: {model_path: /nonexistent/model, max_prompt_tokens: 8000, max_response_tokens: 8000, max_model_len: 16000}
cluster: {node_num: 1, gpu_per_node: 8}
buffer:
  total_epochs: 1
  batch_size: 96
  train_batch_size: 960
  explorer_input:
    taskset: {name: gsm8k, storage_type: file, path: /nonexistent/gsm8k, format: {prompt_key: question, response_key: answer},
              rollout_args: {temperature: 1.0}}
    default_workflow_type: math_trainable_ruler_workflow
  trainer_input: {experience_buffer: {name: gsm8k_buffer, storage_type: queue}}
explorer: {rollout_model: {engine_num: 4, tensor_parallel_size: 1}}
synchronizer: {sync_style: explorer_driven, sync_method: nccl, sync_interval: 5}
"""


def test_smoke_trinitys_trainable_ruler_leaves_dynamic_sampling_out(tmp_path, capsys):
    config = tmp_path / "gsm8k_ruler.yaml"
    config.write_text(TRAINABLE_RULER)
    rc = main(["smoke", "--workdir", str(tmp_path / "w"), "--dialect", "trinity", str(config)])
    out, err = capsys.readouterr()
    assert rc == 0, out + err
    # a random model's responses score alike: the filter would keep no group and draw rounds without end
    assert "algorithm.filter_groups.enable: True -> False" in out
    # the taskset's folder is on the cluster, not here: synthetic rows with its columns stand in
    assert 'data.train_files: ["/nonexistent/gsm8k@train"] -> 4 synthetic rows' in out
    steps = [m for m in metrics(tmp_path / "w") if "actor/pg_loss" in m]
    assert [m["step"] for m in steps] == [1, 2]
    assert all("self_judge/gold_groups" in m and "self_judge/parsed" in m for m in steps)


def test_smoke_rows_carry_the_columns_a_built_in_agent_or_a_selector_reads(tmp_path):
    from posttrain.trainer.smoke import smoke_config

    path, lines = smoke_config(None, ["rollout.agent.function=posttrain.agents.agentscope_frozenlake:frozenlake_agent",
                                      "data.train_files=/nonexistent/lakes.parquet", "model.path=/nonexistent/model"], None, tmp_path)
    rows = [json.loads(line) for line in (tmp_path / "data" / "train_files.jsonl").read_text().splitlines()]
    # each stand-in row is a small lake of its own: the agent's size, p and seed columns
    assert [(r["size"], r["seed"]) for r in rows] == [(3, 0), (4, 1), (3, 2), (4, 3)] and all(r["p"] == 0.8 for r in rows)
    # a selector's per-row numbers (BOTS' pass rates of two reference models) are columns of the stand-in rows too
    smoke_config(None, ["data.selector.type=difficulty_based", "data.selector.feature_keys=[weak_rate,strong_rate]",
                        "data.train_files=/nonexistent/rows.parquet", "model.path=/nonexistent/model"], None, tmp_path / "bots")
    rows = [json.loads(line) for line in (tmp_path / "bots" / "data" / "train_files.jsonl").read_text().splitlines()]
    assert all(0 <= r["weak_rate"] <= 1 and 0 <= r["strong_rate"] <= 1 for r in rows)


def test_smoke_builds_the_email_agents_mailbox_and_asks_about_it(tmp_path):
    """Trinity-RFT's email agent (grpo_email_search) reads a mailbox database the cluster has: smoke
    builds a small one and writes question rows whose answers are in it."""
    from posttrain.agents.email_search import Mailbox
    from posttrain.trainer.smoke import smoke_config
    import yaml

    path, lines = smoke_config(None, ["rollout.agent.function=posttrain.agents.email_search:email_agent",
                                      "data.train_files=/nonexistent/questions.parquet", "model.path=/nonexistent/model"], None, tmp_path)
    db = str(tmp_path / "smoke_mailbox.db")
    assert f'rollout.agent.kwargs.db_path: null -> {db} (not on this machine: a stand-in built here)' in lines
    assert yaml.safe_load(path.read_text())["rollout"]["agent"]["kwargs"]["db_path"] == db
    rows = [json.loads(line) for line in (tmp_path / "data" / "train_files.jsonl").read_text().splitlines()]
    mailbox = Mailbox(db)
    for row in rows:  # each question's source email is in the row's inbox and holds its answer
        (source,) = row["message_ids"]
        assert row["answer"] in mailbox.email(source)["body"] and row["inbox_address"] == "kay.mann@enron.com"
    assert [hit["message_id"] for hit in mailbox.search("kay.mann@enron.com", ["turbine"], "2001-12-31")] == ["<smoke-1@enron.com>"]
    # a mailbox the user names is kept
    mine = tmp_path / "mine.db"
    mine.write_bytes((tmp_path / "smoke_mailbox.db").read_bytes())
    _, lines = smoke_config(None, ["rollout.agent.function=posttrain.agents.email_search:email_agent", f"rollout.agent.kwargs.db_path={mine}",
                                   "data.train_files=/nonexistent/questions.parquet", "model.path=/nonexistent/model"], None, tmp_path / "kept")
    assert not [line for line in lines if "db_path" in line]


def test_smoke_stands_in_for_expert_rows_that_are_not_here(tmp_path):
    """Trinity-RFT's mix_vlm names its expert SFT rows by a Hub dataset this machine does not cache:
    smoke writes rows under the mix's own column names and shrinks the expert batch to fit them."""
    from posttrain.trainer.smoke import smoke_config
    import yaml

    path, lines = smoke_config(None, ["algorithm.mix.expert_files=[org/geometry_sft@train]", "algorithm.mix.prompt_key=problem",
                                      "algorithm.mix.response_key=solution", "algorithm.mix.expert_batch_size=64",
                                      "data.train_files=/nonexistent/rows.parquet", "model.path=/nonexistent/model"], None, tmp_path)
    mix = yaml.safe_load(path.read_text())["algorithm"]["mix"]
    assert mix["expert_files"] == [str(tmp_path / "data" / "expert_files.jsonl")] and mix["expert_batch_size"] == 2
    assert any(line.startswith('algorithm.mix.expert_files: ["org/geometry_sft@train"] -> 4 synthetic rows') for line in lines)
    rows = [json.loads(line) for line in (tmp_path / "data" / "expert_files.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r["problem"][0]["role"] == "user" and r["solution"] for r in rows)


def test_smoke_config_substitutes_an_nsys_profiler(tmp_path):
    """verl's nsys profiler (examples/ppo_trainer/run_qwen2-7b_rm_seq_balance_nsys.sh) needs an NVIDIA
    GPU: smoke traces the same steps with torch's profiler and drops the nsys launch options."""
    from posttrain.trainer.smoke import smoke_config
    import yaml

    path, lines = smoke_config(None, ["global_profiler.tool=nsys", "global_profiler.steps=[1,2]", "actor_rollout_ref.actor.profiler.enable=True",
                                      "global_profiler.global_tool_config.nsys.worker_nsight_options.trace=cuda,nvtx",
                                      "actor_rollout_ref.model.path=/nonexistent/model"], "verl", tmp_path)
    assert "profiler.tool: nsys -> torch (no NVIDIA GPU here: torch's profiler traces the same steps)" in lines
    written = yaml.safe_load(path.read_text())
    assert written["profiler"]["tool"] == "torch"
    assert 'trainer.worker_nsight_options: {"trace": "cuda,nvtx"} -> {} (no nsys run here)' in lines
    assert not written["trainer"].get("worker_nsight_options")


def test_smoke_rows_of_the_countdown_scorer_are_countdown_problems(tmp_path):
    from posttrain.trainer.smoke import smoke_config

    smoke_config(None, ["reward.custom_reward_function.name=countdown_equation", "data.train_files=/nonexistent/cd.parquet",
                        "model.path=/nonexistent/model"], None, tmp_path)
    rows = [json.loads(line) for line in (tmp_path / "data" / "train_files.jsonl").read_text().splitlines()]
    truths = [json.loads(r["reward_model"]["ground_truth"]) for r in rows]  # what the scorer reads: numbers and a target
    assert all(set(t) == {"numbers", "target"} and len(t["numbers"]) == 3 for t in truths)


def test_smoke_rows_of_tool_n1_prompts_hold_a_tool_and_its_call(tmp_path):
    from posttrain.data.tool_n1 import COLUMNS
    from posttrain.trainer.smoke import smoke_config

    path, lines = smoke_config(None, ["data.prompt_format=tool_n1", "data.response_key=answer", "data.train_files=/nonexistent/toolace.parquet",
                                      "model.path=/nonexistent/model"], None, tmp_path)
    rows = [json.loads(line) for line in (tmp_path / "data" / "train_files.jsonl").read_text().splitlines()]
    assert all(set(COLUMNS) <= set(r) for r in rows)
    assert all(json.loads(r["answer"]) == json.loads(r["reward_model"]["ground_truth"]) for r in rows)  # the truth: the call to make
    assert any(line.startswith("data.max_prompt_length: 512 -> 2048") for line in lines)  # room for Tool-N1's instructions


def test_smoke_a_bench_of_a_hosted_model_against_the_tiny_model_behind_a_local_endpoint(tmp_path, capsys, monkeypatch):
    """Trinity-RFT's bench of an external model: the hosted model is not reachable here, so the tiny
    model answers behind posttrain's chat endpoint, named by the file's own environment variables."""
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    config = tmp_path / "external_model.yaml"
    config.write_text(yaml.safe_dump({
        "mode": "bench", "model": {"model_path": "qwen3-max", "max_model_len": 4096, "max_prompt_tokens": 2048, "max_response_tokens": 1024,
                                   "external_model": {"enable": True, "model_name": "qwen3-max", "base_url_env": "OPENAI_BASE_URL",
                                                      "api_key_env": "OPENAI_API_KEY"}},
        "buffer": {"batch_size": 16, "total_epochs": 1, "explorer_input": {
            "eval_tasksets": [{"name": "gsm8k_eval", "storage_type": "file", "path": str(tmp_path / "absent"), "split": "test",
                               "format": {"prompt_key": "question", "response_key": "answer"}, "rollout_args": {"temperature": 1.0}}],
            "default_eval_workflow_type": "math_workflow"}}}))
    rc = main(["smoke", "--workdir", str(tmp_path / "w"), "--dialect", "trinity", str(config)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "rollout.external: the endpoint $OPENAI_BASE_URL serving 'qwen3-max' -> posttrain's chat endpoint" in out
    assert "smoke: the stand-in endpoint is http://127.0.0.1:" in out and "benched the stand-in endpoint here" in out
    rows = (tmp_path / "w" / "run" / "bench" / "bench.csv").read_text().splitlines()
    assert rows[0].startswith("step,") and rows[1].startswith("0,") and len(rows) == 2
    assert "OPENAI_BASE_URL" not in os.environ  # the run's variables are put back


def test_smoke_rows_give_each_built_in_scorer_a_ground_truth_it_reads(tmp_path):
    from posttrain.rewards.code import read_tests
    from posttrain.rewards.scorers import load_scorer
    from posttrain.trainer.smoke import smoke_config

    roll = "roll.pipeline.rlvr.rewards"
    classes = {"mc": f"{roll}.crossthinkqa_rule_reward_worker.CrossThinkQARuleRewardWorker",
               "ifeval": f"{roll}.ifeval_rule_reward_worker.GeneralRuleRewardWorker",
               "code": f"{roll}.code_sandbox_reward_worker.CodeSandboxRewardWorker",
               "math": f"{roll}.math_rule_reward_worker.MathRuleRewardWorker"}
    config = tmp_path / "rlvr.yaml"
    config.write_text(yaml.safe_dump({
        "pretrain": "/nonexistent/policy", "rollout_batch_size": 8,
        "rewards": {name: {"worker_cls": cls, "tag_included": [name]} for name, cls in classes.items()},
        "actor_train": {"data_args": {"file_name": ["/nonexistent/train.jsonl"]}}}))
    path, _ = smoke_config(str(config), [], "roll", tmp_path / "w")
    written = yaml.safe_load(path.read_text())
    rows = {r["data_source"]: r for r in map(json.loads, open(written["data"]["train_files"][0]))}
    assert set(rows) == set(classes)
    for name, worker in written["reward"]["workers"].items():  # each scorer reads its rows' truth without raising
        truth = rows[name]["reward_model"]["ground_truth"]
        if worker["worker_cls"] == "code":  # scoring would run a program: its test cases parse
            assert read_tests(truth)[0] == "input"
            continue
        kwargs = {k: v for k, v in worker.items() if k == "reward_type"}
        result = load_scorer(worker["worker_cls"], kwargs, f"reward.workers.{name}.worker_cls")(name, "\\boxed{B} 1", truth, {})
        assert isinstance(result, (int, float, dict)), (name, result)


def test_smoke_leaves_out_frozen_prefixes_of_modules_the_tiny_model_lacks(tmp_path):
    from posttrain.trainer.smoke import smoke_config

    config = tmp_path / "rlvr.yaml"
    config.write_text(yaml.safe_dump({
        "pretrain": "/nonexistent/policy", "rollout_batch_size": 8,
        "actor_train": {"model_args": {"freeze_module_prefix": "model.visual,model.embed_tokens"},
                        "data_args": {"file_name": ["/nonexistent/train.jsonl"]}}}))
    path, lines = smoke_config(str(config), [], "roll", tmp_path / "w")
    assert yaml.safe_load(path.read_text())["actor"]["freeze_module_prefix"] == ["model.embed_tokens"]
    assert 'actor.freeze_module_prefix: ["model.visual"] -> left out (modules of the user\'s model the tiny model lacks)' in lines
