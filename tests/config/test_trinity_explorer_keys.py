"""Trinity-RFT's explorer, sample-strategy, auxiliary and service keys: accepted where they are what posttrain
does, translated where posttrain has the feature, refused with a reason true of posttrain's design otherwise."""

from __future__ import annotations

from posttrain.config.dialects import translate


ENGINE_DEFAULT = "explorer.rollout_model.engine_type"  # a file naming no engine samples with vLLM, Trinity-RFT's default


def entries(raw: dict, prefix: str = "") -> dict:
    """The report's entries under `prefix`, but the engine default every RL file gets (tests/config/test_dialects.py)."""
    return {e.key: (e.status, e.reason, e.native, e.value) for e in translate(raw, "trinity")[1].entries
            if e.key.startswith(prefix) and not (e.key == ENGINE_DEFAULT and e.reason.startswith("Trinity-RFT's default"))}


def test_runner_keys_at_what_posttrain_does_are_accepted_other_values_refused():
    accepted = {"max_timeout": 900, "max_retry_times": 2, "runner_per_model": 16, "runner_state_report_interval": 10,
                "dynamic_timeout": {"enable": False, "ratio": 3.0}, "rollout_model": {"engine_num": 1, "enable_history": False, "use_v1": True}}
    got = entries({"explorer": accepted}, "explorer.")
    assert {k: v[0] for k, v in got.items()} == {k: "dropped" for k in got} and len(got) == 9
    refused = entries({"explorer": {"dynamic_timeout": {"enable": True}, "rollout_model": {"engine_num": 2, "enable_history": True, "use_v1": False}}},
                      "explorer.")
    assert {v[0] for v in refused.values()} == {"refused"}
    split = entries({"explorer": {"max_repeat_times_per_runner": 4}}, "explorer.")["explorer.max_repeat_times_per_runner"]
    assert split[0] == "dropped" and "joins back into the task's group" in split[1]  # scheduling only
    assert "need 2 devices, but cluster.node_num × gpu_per_node gives none" in refused["explorer.rollout_model.engine_num"][1]
    assert all("not implemented yet" not in v[1] for v in refused.values())


def test_engine_num_places_the_explorer_on_devices_of_its_own_as_trinity_does():
    def placed(mode: str, engines: int) -> dict:
        raw = {"mode": mode, "cluster": {"node_num": 1, "gpu_per_node": 8}, "explorer": {"rollout_model": {"engine_num": engines}}}
        return translate(raw, "trinity")[0]["cluster"].get("device_mapping", {})
    # mode both: the trainer gets the 8 devices less the explorer's (Trinity-RFT's rule), the explorer the rest
    assert placed("both", 2) == {"actor": [0, 1, 2, 3, 4, 5], "rollout": [6, 7]}
    assert placed("both", 4) == {"actor": [0, 1, 2, 3], "rollout": [4, 5, 6, 7]}
    assert placed("explore", 2) == {"rollout": [0, 1]}  # the explorer alone: two engine processes
    refused = entries({"cluster": {"gpu_per_node": 8}, "explorer": {"rollout_model": {"engine_num": 8}}})["explorer.rollout_model.engine_num"]
    assert refused[0] == "refused" and "leave none of the cluster's 8 for the trainer" in refused[1]
    assert entries({"mode": "train", "cluster": {"gpu_per_node": 8}, "explorer": {"rollout_model": {"engine_num": 4}}})[
        "explorer.rollout_model.engine_num"][0] == "dropped"  # a train run has no explorer


def test_staleness_control_is_accepted_within_posttrains_own_bound():
    base = {"algorithm": {"sample_strategy": "staleness_control", "sample_strategy_args": {"staleness_limit": 2}}}
    assert entries({**base, "synchronizer": {"sync_interval": 2}})["algorithm.sample_strategy"][0] == "dropped"  # lag <= 1 step: 2 behind at most
    got = entries({**base, "synchronizer": {"sync_interval": 2, "sync_offset": 1}})["algorithm.sample_strategy"]
    assert got[0] == "refused" and "sync_interval + sync_offset <= 2" in got[1]
    assert entries({"algorithm": {"sample_strategy": "default"}})["algorithm.sample_strategy"][0] == "dropped"
    assert entries({"algorithm": {"sample_strategy": "mix"}})["algorithm.sample_strategy"][0] == "refused"  # outside the mix types


def test_auxiliary_buffers_and_models_outside_their_types_and_services_are_refused_by_reason():
    got = entries({"algorithm": {"algorithm_type": "grpo"}, "buffer": {"trainer_input": {"auxiliary_buffers": {"x": {"path": "p"}}}},
                   "explorer": {"auxiliary_models": [{"model_path": "judge"}]},
                   "service": {"data_juicer": {"auto_start": True}}, "data_processor": {"task_pipeline": {"operators": []}}})
    assert got["buffer.trainer_input.auxiliary_buffers"][0] == got["explorer.auxiliary_models"][0] == "refused"
    assert "this file's workflow calls none" in got["explorer.auxiliary_models"][1]
    assert got["service.data_juicer.auto_start"][0] == "refused" and "Data-Juicer" in got["service.data_juicer.auto_start"][1]
    teacher = entries({"algorithm": {"algorithm_type": "on_policy_distill"}, "explorer": {"auxiliary_models": [{"model_path": "t"}]}})
    assert teacher["explorer.auxiliary_models[0].model_path"][2:] == ("ref.model_path", "t")
    # an empty list (Trinity's default, written out in its tinker example) is no model at all: accepted, nothing served
    native, report = translate({"algorithm": {"algorithm_type": "grpo"}, "explorer": {"auxiliary_models": []}}, "trinity")
    [empty] = [e for e in report.entries if e.key == "explorer.auxiliary_models"]
    assert empty.status == "dropped" and "no auxiliary models" in empty.reason and "auxiliary_models" not in native.get("reward", {})


def test_serve_keys_translate_and_more_than_one_serving_engine_is_refused():
    raw = {"mode": "serve", "explorer": {"proxy_port": 8011, "listen_address": "0.0.0.0", "service_status_check_interval": 30,
                                         "db_url": "sqlite:////tmp/h.db", "min_running_model_num": 1,
                                         "rollout_model": {"engine_num": 1, "enable_openai_api": True}}}
    got = entries(raw, "explorer.")
    assert {k: got[f"explorer.{k}"][2:] for k in ("proxy_port", "listen_address", "service_status_check_interval", "db_url")} == {
        "proxy_port": ("explorer.proxy_port", 8011), "listen_address": ("explorer.listen_address", "0.0.0.0"),
        "service_status_check_interval": ("explorer.service_status_check_interval", 30), "db_url": ("explorer.db_url", "sqlite:////tmp/h.db")}
    assert got["explorer.min_running_model_num"][0] == got["explorer.rollout_model.enable_openai_api"][0] == "dropped"
    assert got["explorer.rollout_model.engine_num"][0] == "dropped"
    many = entries({"mode": "serve", "cluster": {"gpu_per_node": 4}, "explorer": {"rollout_model": {"engine_num": 4}}})
    assert many["explorer.rollout_model.engine_num"][0] == "refused" and "one engine in one process" in many["explorer.rollout_model.engine_num"][1]
    assert entries({"mode": "both", "explorer": {"rollout_model": {"enable_openai_api": True}}})[
        "explorer.rollout_model.enable_openai_api"][0] == "refused"  # outside serve mode: no OpenAI server of the engine


def test_task_timeout_and_retries_are_kept_and_trinity_defaults_dropped():
    """A per-task timeout is posttrain's explorer.max_timeout (a prompt group's deadline): the values
    are kept; Trinity-RFT's defaults stay accepted and set nothing (no deadline, any engine)."""
    def native(explorer: dict) -> dict:
        return translate({"explorer": explorer}, "trinity")[0].get("explorer", {})
    assert native({"max_timeout": 60, "max_retry_times": 0}) == {"max_timeout": 60, "max_retry_times": 0}
    assert native({"max_timeout": 360}) == {"max_timeout": 360, "max_retry_times": 2}  # Trinity-RFT's default retries
    assert native({"max_retry_times": 3}) == {"max_timeout": 1800, "max_retry_times": 3}  # under its default timeout
    for defaults in ({"max_timeout": 1800}, {"max_timeout": 900, "max_retry_times": 2}, {"max_retry_times": 2}):
        got = entries({"explorer": defaults}, "explorer.")
        assert native(defaults) == {} and {v[0] for v in got.values()} == {"dropped"} and "Trinity-RFT's default" in next(iter(got.values()))[1]
    bad = entries({"explorer": {"max_timeout": -5, "max_retry_times": 1.5}}, "explorer.")
    assert bad["explorer.max_timeout"][:2] == ("refused", "expected a number of seconds > 0, got -5")
    assert bad["explorer.max_retry_times"][:2] == ("refused", "expected a whole number >= 0, got 1.5")
    # a stage of a multi-stage file translates them too
    stages = translate({"stages": [{"stage_name": "a", "explorer": {"max_timeout": 30}}]}, "trinity")[0]["stages"]
    assert stages[0]["explorer"] == {"max_timeout": 30, "max_retry_times": 2}


def test_over_rollout_is_posttrains_own_key_and_trinitys_sync_style_rule_holds():
    """explorer.over_rollout translates as it is; Trinity-RFT refuses a ratio above 0 with sync_style
    fixed (its default, checked case-insensitively as its enum is), so posttrain refuses that file too."""
    dynamic = {"explorer": {"over_rollout": {"ratio": 0.5, "wait_after_min": 9}}, "synchronizer": {"sync_style": "dynamic_by_explorer"}}
    native, report = translate(dynamic, "trinity")
    assert native["explorer"]["over_rollout"] == {"ratio": 0.5, "wait_after_min": 9}
    assert {e.key: e.status for e in report.entries if "over_rollout" in e.key} == {
        "explorer.over_rollout.ratio": "translated", "explorer.over_rollout.wait_after_min": "translated"}
    for sync in ({}, {"synchronizer": {"sync_style": "FIXED"}}):
        got = entries({"explorer": {"over_rollout": {"ratio": 0.5, "wait_after_min": 9}}, **sync}, "explorer.over_rollout")
        assert got["explorer.over_rollout.ratio"][0] == "refused"
        assert "Trinity-RFT refuses over_rollout.ratio 0.5 with synchronizer.sync_style fixed" in got["explorer.over_rollout.ratio"][1]
        assert got["explorer.over_rollout.wait_after_min"][0] == "dropped"
    zero = translate({"explorer": {"over_rollout": {"ratio": 0.0}}}, "trinity")[0]  # 0 waits for every task, in any style
    assert zero["explorer"]["over_rollout"] == {"ratio": 0.0}
