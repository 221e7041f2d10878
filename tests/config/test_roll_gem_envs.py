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
