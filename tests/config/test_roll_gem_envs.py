"""ROLL's GEM-based agentic examples (examples/qwen3_agentic_gem): `roll_math` / `roll_qa` entries with a
`tool_wrapper` are checked before a model is loaded, for the entries the managers play only, and the
ROLL-format entry reaches the trainer unchanged."""

from __future__ import annotations

import pytest

from posttrain.config.load import load_config
from posttrain.errors import ConfigError
from posttrain.trainer.agentic import check_agentic

MCP = {"tool_configs": [{"tool_id": "mcp", "tool_args": {"server_url": "xxx"}}]}
CODE = {"wrapper_args": {"tool_reward": 0, "tool_success_reward": 0, "max_tool_uses": 1},
        "tool_configs": [{"tool_id": "python_code", "tool_args": {"timeout": 5, "sandbox_type": "none", "keep_error_last_line": False}}]}


def config(tmp_path, played: str, data: str):
    envs = {
        "dapo": {"env_type": "roll_math", "max_steps": 10, "max_tokens_per_step": 64,
                 "env_config": {"max_steps": 10, "dataset_name": data, "question_key": "prompt", "answer_key": "solution"}, "tool_wrapper": CODE},
        "qa_mcp": {"env_type": "roll_qa", "env_config": {"dataset_name": "nobody/HotpotQA", "split": "train"}, "tool_wrapper": MCP},
    }
    return load_config(None, [f"env.custom_envs={envs}".replace("'", '"'), f"env.train_env_manager.tags=[{played}]",
                              "env.train_env_manager.num_env_groups=2", "data.train_batch_size=2", "actor.ppo_mini_batch_size=2",
                              "trainer.total_training_steps=1"])


def test_only_the_played_entries_need_their_data_and_their_tools(tmp_path):
    data = tmp_path / "dapo.jsonl"
    data.write_text('{"prompt": "1+1?", "solution": "2"}\n')
    plan = check_agentic(config(tmp_path, "dapo", str(data)))  # qa_mcp's hub dataset and MCP tool are never used
    assert plan.specs["dapo"].tools.max_tool_uses == 1
    with pytest.raises(ConfigError) as e:
        check_agentic(config(tmp_path, "qa_mcp", str(data)))
    text = "\n".join(e.value.problems)
    assert "env.custom_envs.qa_mcp.tool_wrapper.tool_configs[0].tool_id: mcp: not supported" in text
    assert "env.custom_envs.qa_mcp.env_config: dataset_name: nobody/HotpotQA@train is not a local file or folder" in text
    with pytest.raises(ConfigError, match=r"env.custom_envs.dapo.env_config: .*gone.jsonl: data file not found"):
        check_agentic(config(tmp_path, "dapo", str(tmp_path / "gone.jsonl")))


def test_smoke_gives_a_played_dataset_env_synthetic_rows_with_its_columns(tmp_path):
    from posttrain.envs.dataset_envs import MathDatasetEnv
    from posttrain.trainer.smoke_envs import local_env_datasets

    here = tmp_path / "here.jsonl"
    here.write_text('{"prompt": "1+1?", "solution": "2"}\n')
    native = {"env": {"custom_envs": {
        # max_steps inside env_config, as ROLL's GEM examples write it: the entry's own key, lifted out by the run
        "gone": {"env_type": "roll_math", "env_config": {"max_steps": 10, "dataset_name": "nobody/DAPO", "split": "train", "question_key": "prompt",
                                                          "answer_key": "solution"}},
        "here": {"env_type": "roll_math", "env_config": {"dataset_name": str(here), "question_key": "prompt", "answer_key": "solution"}},
        "idle": {"env_type": "roll_qa", "env_config": {"dataset_name": "nobody/HotpotQA"}}},
        "train_env_manager": {"tags": ["gone", "here"]}, "val_env_manager": {"tags": ["gone"]}}}
    lines = local_env_datasets(native, tmp_path)
    assert len(lines) == 1 and lines[0].startswith("env.custom_envs.gone.env_config.dataset_name: nobody/DAPO -> ")
    envs = native["env"]["custom_envs"]
    assert envs["here"]["env_config"]["dataset_name"] == str(here) and envs["idle"]["env_config"]["dataset_name"] == "nobody/HotpotQA"
    config = envs["gone"]["env_config"]
    assert "split" not in config
    env = MathDatasetEnv(**{k: v for k, v in config.items() if k != "max_steps"})
    question = env.reset(0)
    n = int(question.split()[2])
    assert env.step(f"\\boxed{{{2 * n}}}")[1] == 1.0  # the synthetic rows are answerable


def test_an_env_config_seed_is_each_groups_own_as_rolls_env_managers_build_them():
    from posttrain.config.dialects import translate
    from posttrain.envs.spec import parse_custom_envs
    from posttrain.trainer.agentic import episodes

    raw = {"custom_envs": {"LC": {"env_type": "rg:letter_counting", "env_config": {"size": 500, "seed": 42}},
                           "G": {"env_type": "game:GuessTheNumber-v0", "env_config": {"max_number": 20}}},
           "train_env_manager": {"tags": ["LC", "G"]}}
    native, report = translate(raw, "roll")
    envs = native["env"]["custom_envs"]
    assert envs["LC"]["seed_per_group"] is True and "seed_per_group" not in envs["G"]  # only an entry with a seed to replace
    assert any(e.native == "env.custom_envs.LC.seed_per_group" for e in report.entries)
    specs = parse_custom_envs({"LC": {"env_type": "task", "env_config": {"task": "sort", "seed": 42}, "seed_per_group": True},
                               "fixed": {"env_type": "task", "env_config": {"task": "sort", "seed": 42}}})
    step1, step2 = (episodes(specs, ["LC", "LC", "fixed"], 7, "s", s) for s in (1, 2))
    seeds1, seeds2 = [c["seed"] for _, _, c in step1], [c["seed"] for _, _, c in step2]
    assert seeds1 == seeds2 and seeds1[0] != seeds1[1] and seeds1[2] == 42  # per group, the same every step; the plain entry keeps 42
    assert step1[0][1] != step2[0][1]  # while the reset seeds move on
    with pytest.raises(ConfigError, match="seed_per_group: true gives each env group its own env_config.seed, and env_config has no seed"):
        parse_custom_envs({"X": {"env_type": "task", "env_config": {"task": "sort"}, "seed_per_group": True}})


def test_rolls_env_manager_format_penalty_is_inert_as_in_roll():
    """ROLL 8eb27cc declares train_env_manager.format_penalty and reads it nowhere (its env managers stopped
    adding it): only the environment's own env_config.format_penalty penalises an action."""
    from posttrain.config.dialects import translate

    raw = {"custom_envs": {"G": {"env_type": "game:GuessTheNumber-v0", "env_config": {"max_number": 20}},
                           "S": {"env_type": "sokoban", "env_config": {"format_penalty": -0.15}}},
           "train_env_manager": {"tags": ["G", "S"], "format_penalty": -0.3}, "val_env_manager": {"tags": ["G"], "format_penalty": -0.3}}
    native, report = translate(raw, "roll")
    assert "format_penalty" not in native.get("env", {}).get("train_env_manager", {})
    dropped = {e.key: e.reason for e in report.entries if e.status == "dropped"}
    assert "read by none of its code" in dropped["train_env_manager.format_penalty"] and "val_env_manager.format_penalty" in dropped
    assert native["env"]["custom_envs"]["S"]["env_config"]["format_penalty"] == -0.15  # the env's own penalty stays
