"""Agent episodes with image observations (ROLL's VLTrajEnvManager): an environment that draws its
state (render_mode: rgb_array) played by a tiny vision-language policy in prompt_mode conversation."""

from __future__ import annotations

import pytest
import torch

from posttrain.config.load import load_config
from posttrain.errors import ConfigError
from posttrain.models.tiny import make_tiny_model
from posttrain.models.vision import image_token_mask
from posttrain.records import VisionInputs
from posttrain.rollout.turn_rows import turn_rows
from posttrain.trainer.agentic import check_agentic
from posttrain.trainer.metrics import PhaseTimer
from posttrain.trainer.rl import RLTrainer
from posttrain.trainer.stage import StageContext

PRE, NEXT = "\\nTurn {turn_idx}:\\nState:\\n", "\\n{actions_left} left, at most {max_response_length} tokens."
ENTRY = ("{env_type: sokoban, env_config: {dim_room: [5, 5], search_depth: 20, render_mode: rgb_array}, max_steps: 3, "
         f'max_tokens_per_step: 3, format_penalty: -0.1, env_instruction: Push, agent_system_template: Play, pre_step_template: "{PRE}", '
         f'next_step_template: "{NEXT}"' + "}")
BASE = ["data.max_prompt_length=256", "data.max_response_length=256", "trainer.logger=[]", f"env.custom_envs={{S: {ENTRY}}}",
        "env.train_env_manager.tags=[S]", "env.train_env_manager.num_env_groups=2", "env.train_env_manager.group_size=2",
        "data.train_batch_size=2", "rollout.n=2", "actor.ppo_mini_batch_size=2", "actor.optim.lr=5e-3", "trainer.total_training_steps=1",
        "actor.reuse_rollout_logprobs=never", "actor.ppo_micro_batch_size_per_gpu=4"]


def make_trainer(model, tmp_path, *overrides: str) -> RLTrainer:
    cfg = load_config(None, [f"model.path={model}", *BASE, *overrides])
    t = RLTrainer(StageContext(name="main", cfg=cfg, run_dir=tmp_path / "run", model_path=str(model)))
    t.roles.sync.push(t.roles.actor.version)
    return t


def explore(t: RLTrainer):
    return t.explore(1, PhaseTimer(t.observer.watch()), expected_version=t.roles.actor.version)


def test_pictures_reach_the_engine_and_the_actor_at_the_same_tokens(tiny_vl_dir, tmp_path):
    """Each episode row carries every picture it showed (the first state, then one after each action
    but the last), its image tokens where the pictures were rendered; the actor's recomputed log-probs
    of the sampled actions are the engine's, which they are only if both filled the same tokens."""
    t = make_trainer(tiny_vl_dir, tmp_path)
    experience = explore(t)
    batch = experience.batch
    pad = t.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    for b, (info, vision) in enumerate(zip(batch.extra_info, batch.vision)):
        assert vision.image_grid_thw.shape[0] == info["turns"]  # the first state, then one after each action but the last
        assert len(vision.image_positions) == int(vision.image_grid_thw.prod(-1).sum()) // 4  # merged patches, 2 x 2
        row = torch.cat([batch.prompt_ids[b][batch.prompt_mask[b] > 0], batch.response_ids[b][batch.response_mask[b] > 0]])
        assert bool((row[vision.image_positions] == pad).all())
        assert batch.loss_mask[b][vision.image_positions[vision.image_positions >= batch.prompt_mask[b].sum()] -
                                  int(batch.prompt_mask[b].sum())].sum() == 0  # the pictures are context, never trained
    prompt = t.tokenizer.decode(batch.prompt_ids[0][batch.prompt_mask[0] > 0])
    assert prompt.startswith("<|im_start|>system\nPlay<|im_end|>\n<|im_start|>user\nPush\nTurn 1:\nState:\n<|vision_start|><|image_pad|>")
    assert prompt.endswith("<|vision_end|>\n3 left, at most 3 tokens.<|im_end|>\n<|im_start|>assistant\n")
    second = t.tokenizer.decode(batch.response_ids[0][batch.response_mask[0] > 0])
    assert "<|im_start|>user\n\nTurn 2:\nState:\n<|vision_start|>" in second and "2 left, at most 3 tokens." in second
    metrics, _ = t.learn(experience, 1, PhaseTimer(t.observer.watch()))
    mask = batch.train_mask > 0
    torch.testing.assert_close(batch.old_logprobs[mask], batch.rollout_logprobs[mask], atol=1e-4, rtol=0)
    assert "actor/pg_loss" in metrics


def test_a_pad_token_the_model_wrote_is_text_where_the_row_lists_its_image_tokens(tiny_vl_dir):
    from transformers import AutoConfig

    class Model:
        config = AutoConfig.from_pretrained(tiny_vl_dir)

    pad = Model.config.image_token_id
    ids = torch.tensor([[0, 0, 5, pad, pad, 7, pad, 9]])  # two padding columns, then a row whose last pad the model wrote
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1]])
    row = VisionInputs(torch.zeros(0, 1), torch.zeros(0, 3, dtype=torch.long), image_positions=torch.tensor([1, 2]))
    assert image_token_mask(Model, ids, 8).sum() == 3  # without positions: every pad of the prompt
    assert image_token_mask(Model, ids, 8, [row], mask).nonzero()[:, 1].tolist() == [3, 4]
    with pytest.raises(ValueError, match="do not all hold the image token"):
        image_token_mask(Model, ids, 8, [VisionInputs(row.pixel_values, row.image_grid_thw, image_positions=torch.tensor([0]))], mask)


def test_pictures_a_run_cannot_show_are_refused(tiny_vl_dir, tmp_path):
    text_model = make_tiny_model(tmp_path / "text", layers=1, hidden=32, heads=4, seed=0)
    with pytest.raises(ConfigError, match=r"environment S \(sokoban\) shows an image, but the policy \(model.path\) is a text-only"):
        explore(make_trainer(text_model, tmp_path / "a"))
    window = f"env.custom_envs={{S: {ENTRY.replace('pre_step_template', 'prompt_mode: window, agent_template: x, x')}}}"
    with pytest.raises(ConfigError, match="pre_step_template: not supported in prompt_mode window"):
        make_trainer(tiny_vl_dir, tmp_path / "b", window)
    # an entry whose env_config says render_mode rgb_array is refused what the vision path cannot do before any model loads
    with pytest.raises(ConfigError, match=r"env.train_rows: turn would part the pictures of \['S'\]"):
        make_trainer(tiny_vl_dir, tmp_path / "c", "env.train_rows=turn")
    with pytest.raises(ConfigError, match=r"S.env_config.render_mode: rgb_array shows pictures: rollout.name vllm: .* hf engine only"):
        check_agentic(load_config(None, [f"model.path={tiny_vl_dir}", *BASE, "rollout.name=vllm"]))
    # turn rows of pictures an environment showed without saying so: refused where the batch is cut
    t = make_trainer(tiny_vl_dir, tmp_path / "d")
    with pytest.raises(ConfigError, match="env.train_rows: turn cuts each episode into a row per action"):
        turn_rows(explore(t).batch, 0)


def test_a_roll_file_of_vl_trajectory_managers_plays_pictures_in_conversation():
    from posttrain.config.dialects import translate
    from posttrain.envs.base import is_image
    from posttrain.envs.spec import parse_custom_envs

    entry = {"env_type": "sokoban", "max_steps": 3, "max_tokens_per_step": 4, "agent_system_template": "S",
             "env_manager_cls": "roll.pipeline.agentic.env_manager.vl_traj_env_manager.VLTrajEnvManager",
             "pre_step_template": "Turn {turn_idx}:", "next_step_template": "{actions_left} left",
             "env_config": {"render_mode": "rgb_array", "dim_room": [5, 5], "format_penalty": -0.1, "action_pattern": "<answer>(.*?)</answer>"}}
    native, _ = translate({"custom_envs": {"S": entry}, "adv_estimator": "grpo",
                           "train_env_manager": {"tags": ["S"], "num_env_groups": 1, "group_size": 2}}, "roll")
    spec = parse_custom_envs(native["env"]["custom_envs"])["S"]
    assert spec.window is None and "train_rows" not in native["env"]  # prompt_mode conversation, episode rows
    assert (spec.turns.template, spec.turns.system, spec.turns.instruction_sep) == ("Turn {turn_idx}:{observation}{actions_left} left", "S", "")
    assert is_image(spec.make(spec.env_config).reset(seed=0)) and spec.parse_action("<answer>Up</answer>") == "Up"
