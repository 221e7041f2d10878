"""Trinity-RFT's taskset and experience-buffer fields beyond the files: a one-taskset ``tasksets``
list is the taskset (reported under the key written), several are refused, a training taskset's
repeat_times is what Trinity-RFT's validator makes it (algorithm.repeat_times), the fields the
validator fills itself are dropped, and a read offset other than 0 is refused (issue 18, item 3)."""

from __future__ import annotations

from posttrain.config.dialects import translate

GRPO = {"algorithm": {"algorithm_type": "grpo", "repeat_times": 8}}


def _run(explorer_input=None, trainer_input=None, algorithm=GRPO):
    buffer = {k: v for k, v in (("explorer_input", explorer_input), ("trainer_input", trainer_input)) if v is not None}
    native, report = translate({**algorithm, "buffer": buffer}, "trinity")
    return native, {e.key: (e.status, e.reason) for e in report.entries}


def test_a_list_of_one_taskset_is_the_taskset_reported_as_written():
    taskset = {"path": "org/tasks", "split": "train", "rollout_args": {"temperature": 0.6}, "format": {"prompt_key": "question"}}
    one, entries = _run({"tasksets": [taskset]})
    plain, _ = _run({"taskset": taskset})
    assert one == plain and one["data"]["train_files"] == ["org/tasks@train"] and one["data"]["prompt_key"] == "question"
    assert entries["buffer.explorer_input.tasksets[0].rollout_args.temperature"][0] == "translated"
    assert not any(k.startswith("buffer.explorer_input.taskset.") for k in entries)
    _, entries = _run({"tasksets": [taskset, {"path": "org/more"}]})
    assert entries["buffer.explorer_input.tasksets"][0] == "refused" and "several training tasksets" in entries["buffer.explorer_input.tasksets"][1]
    _, entries = _run({"taskset": taskset, "tasksets": []})
    assert entries["buffer.explorer_input.tasksets"][0] == "dropped"


def test_a_training_tasksets_repeat_times_gives_way_to_algorithm_repeat_times_and_an_evaluations_is_its_own():
    native, entries = _run({"taskset": {"path": "org/tasks", "repeat_times": 4}, "eval_tasksets": [{"path": "org/tasks", "repeat_times": 3}]})
    assert native["rollout"]["n"] == 8 and native["rollout"]["val_kwargs"]["n"] == 3
    assert entries["buffer.explorer_input.taskset.repeat_times"][0] == "dropped"
    native, _ = _run({"taskset": {"path": "org/tasks", "repeat_times": 4}}, algorithm={"algorithm": {"algorithm_type": "grpo"}})
    assert native.get("rollout", {}).get("n", 1) == 1  # Trinity-RFT's default repeat_times, whatever the taskset says


def test_the_validators_own_fields_are_dropped_and_a_read_offset_is_refused():
    fields = {"total_epochs": 3, "total_steps": 10, "index": 0}
    _, entries = _run({"taskset": {"path": "org/tasks", **fields}})
    assert {k.rpartition(".")[2]: s for k, (s, _) in entries.items() if k.rpartition(".")[2] in fields} == dict.fromkeys(fields, "dropped")
    _, entries = _run({"taskset": {"path": "org/tasks", "index": 64}})
    assert entries["buffer.explorer_input.taskset.index"][0] == "refused"
    sft = {"algorithm": {"algorithm_type": "sft"}}
    _, entries = _run(trainer_input={"experience_buffer": {"path": "org/rows", "total_epochs": 2, "index": 16}}, algorithm=sft)
    assert entries["buffer.trainer_input.experience_buffer.total_epochs"][0] == "dropped"
    assert entries["buffer.trainer_input.experience_buffer.index"][0] == "refused"
