"""Trinity-RFT's buffer.explorer_input.taskset.data_selector translates onto data.selector: its type,
feature_keys and the difficulty-based kwargs key by key, its seed (42 when left out) onto data.seed;
kwargs a selector does not read are dropped, difficulty_based without the pass_rate_calculator that
feeds it is refused, and a taskset without a selector is read in file order, as Trinity-RFT reads it."""

from __future__ import annotations

from posttrain.config.dialects import translate

_SEL = "buffer.explorer_input.taskset.data_selector"
FEEDS = {"data_processor": {"experience_pipeline": {"operators": [{"name": "pass_rate_calculator"}]}}}


def run(selector=None, **top):
    taskset = {"path": "data.jsonl"} if selector is None else {"path": "data.jsonl", "data_selector": selector}
    native, report = translate({"buffer": {"explorer_input": {"taskset": taskset}}, **top}, "trinity")
    return native, {e.key: e.status for e in report.entries}


def test_the_bots_selector_translates_key_by_key():
    kwargs = {"m": 16, "lamb": 0.1, "rho": 0.1, "target_reward": 0.5, "tau": 0, "do_sample": True}
    native, entries = run({"selector_type": "difficulty_based", "feature_keys": ["weak", "strong"], "kwargs": kwargs}, **FEEDS)
    assert native["data"]["selector"] == {"type": "difficulty_based", "feature_keys": ["weak", "strong"], **kwargs}
    assert native["data"]["seed"] == 42  # Trinity-RFT's DataSelectorConfig seed
    assert native["data_processor"]["experience_pipeline"]["operators"] == [{"name": "pass_rate_calculator"}]
    assert not [k for k, status in entries.items() if status == "refused"]


def test_seed_unread_kwargs_and_a_selector_that_would_never_learn():
    native, entries = run({"selector_type": "random", "seed": 7, "kwargs": {"tau": 0}})
    assert native["data"]["selector"] == {"type": "random"} and native["data"]["seed"] == 7
    assert entries[f"{_SEL}.kwargs.tau"] == "dropped"
    native, entries = run({"selector_type": "difficulty_based", "feature_keys": ["weak", "strong"]})
    assert entries[f"{_SEL}.selector_type"] == "refused"  # no pass_rate_calculator: Trinity's estimate never moves


def test_a_taskset_without_a_selector_is_read_in_file_order():
    native, _ = run()
    assert native["data"]["selector"] == {"type": "sequential"} and "seed" not in native["data"]
    native, _ = run(algorithm={"algorithm_type": "sft"})  # SFT rows are drawn uniformly
    assert "selector" not in native.get("data", {})


def test_an_experience_pipeline_that_saves_no_input_file_is_what_posttrain_does():
    def statuses(pipeline):
        _, report = translate({"data_processor": {"experience_pipeline": pipeline}}, "trinity")
        return {e.key.rpartition(".")[2]: e.status for e in report.entries if "experience_pipeline" in e.key}

    assert statuses({"save_input": False, "input_save_path": "/runs/inputs.jsonl"}) == {"save_input": "dropped", "input_save_path": "dropped"}
    assert statuses({"save_input": True}) == {"save_input": "refused"}  # a file posttrain does not write
    assert statuses({"save_input": True, "input_save_path": "/runs/inputs.jsonl"})["input_save_path"] == "refused"
