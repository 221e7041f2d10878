"""GEM's environments that ROLL's GEM examples name: `game:GuessTheNumber-v0` (its rewards, endings and
seeded secrets as gem-llm 0.0.4 computes them) and reasoning-gym datasets as `rg:NAME`."""

from __future__ import annotations

import doctest
import re
import sys

import pytest

from posttrain.config.dialects import translate
from posttrain.envs import guess_the_number, reasoning_gym_env
from posttrain.envs.guess_the_number import GuessTheNumber
from posttrain.envs.registry import ENVS, env_class, make_env
from posttrain.envs.spec import parse_custom_envs
from posttrain.errors import ConfigError
from posttrain.models.tokenizer import CHATML_TEMPLATE
from posttrain.rollout.agent_loop import EnvSlot, LoopLimits, run_episodes
from posttrain.rollout.base import SamplingParams
from posttrain.rollout.turns import TurnRenderer
from tests.rollout.test_agent_loop import TOK, ScriptedEngine

CONCAT = "roll.pipeline.agentic.env_manager.step_concat_env_manager.StepConcatEnvManager"


def test_doctests():
    assert doctest.testmod(guess_the_number).failed == 0


def test_the_secret_is_the_one_gem_draws_for_the_seed():
    # gem-llm 0.0.4, gem.make("game:GuessTheNumber-v0").reset(seed=s).game_number for s = 0..9
    game = GuessTheNumber()
    secrets = []
    for seed in range(10):
        game.reset(seed)
        secrets.append(game.secret)
    assert secrets == [13, 5, 2, 8, 8, 20, 19, 11, 8, 15]
    # the -random variant draws the range, then the turns follow from it, then the secret (GEM's values)
    random_game = ENVS["game:GuessTheNumber-v0-random"]()
    drawn = []
    for seed in range(4):
        random_game.reset(seed)
        drawn.append((random_game.max_number, random_game.max_turns, random_game.secret))
    assert drawn == [(51, 9, 49), (19, 6, 19), (9, 4, 2), (32, 7, 9)]


def play(game: GuessTheNumber, seed: int, actions: list[str]) -> list[tuple[float, bool, bool, bool]]:
    game.reset(seed)
    out = []
    for action in actions:
        _, reward, done, info = game.step(action)
        out.append((reward, done, info["success"], info["action_is_valid"]))
    return out


def test_a_scripted_game_gets_gems_rewards_and_ending():
    # seed 0's secret is 13; five turns: outside the range, low, the same again, high, then the last
    # turn 2 away: GEM's last-turn reward 1 - |15 - 13| / (20 - 1)
    steps = play(GuessTheNumber(max_turns=5), 0, ["\\boxed{25}", "\\boxed{10}", "\\boxed{10}", "I say \\boxed{16}", "\\boxed{15}"])
    assert steps == [(0.0, False, False, True)] * 4 + [(pytest.approx(17 / 19), True, False, True)]
    # seed 1's secret is 5: found on the second turn
    assert play(GuessTheNumber(), 1, ["\\boxed{10}", "\\boxed{3} or rather \\boxed{5}"]) == [(0.0, False, False, True), (1.0, True, True, True)]
    # no readable guess ends the game with -0.1 at once, on any turn; \boxed{0} and a sign are no guess for GEM
    for bad in ("twelve", "\\boxed{0}", "\\boxed{-4}", "\\boxed{ 4}"):
        assert play(GuessTheNumber(), 2, ["\\boxed{9}", bad]) == [(0.0, False, False, True), (-0.1, True, False, False)]
    # a last guess outside the range scores 0, not by distance
    assert play(GuessTheNumber(max_turns=2), 0, ["\\boxed{1}", "\\boxed{99}"])[-1] == (0.0, True, False, True)


def test_the_observations_carry_the_hints_and_the_numbers():
    game = GuessTheNumber(min_number=3, max_number=40, max_turns=4)
    first = game.reset(0)
    assert "between 3 and 40" in first and "at most 4 guesses" in first and "\\boxed{21}" in first
    assert game.step("\\boxed{30}")[0] == "Guess 1: 30 is too high; the secret number is lower than 30."
    assert game.step("\\boxed{30}")[0] == "Guess 2: 30 was guessed before."
    assert game.step("\\boxed{2}")[0] == "Guess 3: 2 is outside the range 3 to 40."
    last = game.step("\\boxed{4}")[0]
    assert last.startswith("Guess 4: 4 is too low") and f"the secret number was {game.secret}" in last


def binary_search(game: GuessTheNumber, seed: int) -> tuple[bool, int]:
    """Play by halving the range the hints leave, reading only the observations: (won, turns)."""
    first = game.reset(seed)
    low, high = map(int, re.search(r"between (\d+) and (\d+)", first).groups())
    for turn in range(1, 1000):
        guess = (low + high) // 2
        observation, _, done, info = game.step(f"so \\boxed{{{guess}}}")
        if done:
            return info["success"], turn
        if "too high" in observation:
            high = guess - 1
        elif "too low" in observation:
            low = guess + 1
    raise AssertionError("the game never ended")


@pytest.mark.parametrize("name, config, seeds", [
    ("game:GuessTheNumber-v0", {}, 200),
    ("game:GuessTheNumber-v0", {"min_number": 1, "max_number": 1000, "max_turns": 10}, 50),
    ("game:GuessTheNumber-v0-easy", {}, 50),
    ("game:GuessTheNumber-v0-hard", {}, 50),
    ("game:GuessTheNumber-v0-random", {}, 100),
])
def test_binary_search_always_wins_within_max_turns(name, config, seeds):
    game = ENVS[name](**config)
    results = [binary_search(game, seed) for seed in range(seeds)]
    assert all(won for won, _ in results)
    assert max(turns for _, turns in results) <= game.max_turns or name.endswith("random")


def test_gems_registered_defaults_and_bad_arguments():
    assert [(g.min_number, g.max_number, g.max_turns) for g in (ENVS[f"game:GuessTheNumber-v0{s}"]() for s in ("", "-easy", "-hard", "-hard-no-max-turn"))] == [
        (1, 20, 10), (1, 10, 4), (1, 50, 7), (1, 50, 50)]
    key = "env.custom_envs.G"
    with pytest.raises(ConfigError, match=r"G.env_config: max_number \(5\) must be above min_number \(5\)"):
        make_env(GuessTheNumber, {"min_number": 5, "max_number": 5}, key)
    with pytest.raises(ConfigError, match=r"max_turns must be an integer >= 1, got 0"):
        make_env(GuessTheNumber, {"max_turns": 0}, key)
    with pytest.raises(ConfigError, match=r"GuessTheNumber\(max_turn\) failed: .*unexpected keyword argument 'max_turn'"):
        make_env(GuessTheNumber, {"max_turn": 3}, key)  # GEM swallows unknown arguments; posttrain names them


def test_a_roll_gem_entry_translates_onto_the_env_in_observation_window_mode():
    entry = {"env_type": "game:GuessTheNumber-v0", "max_steps": 20, "max_tokens_per_step": 64, "env_manager_cls": CONCAT,
             "use_thread_lock": True, "history_length": 20, "agent_system_template": None,
             "agent_template": "Observation:\n{history}\n{current_observation}\nAnswer in \\boxed{{}}.",
             "env_config": {"min_number": 1, "max_number": 20, "max_turns": 20}}
    raw = {"actor_train": {"training_args": {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 1}},
           "rollout_batch_size": 2, "custom_envs": {"GuessTheNumber": entry, "LC": {**entry, "env_type": "rg:letter_counting",
                                                                                     "env_config": {"size": 30, "seed": 7}}},
           "train_env_manager": {"tags": ["GuessTheNumber"], "num_env_groups": 2, "group_size": 1}}
    specs = parse_custom_envs(translate(raw, "roll")[0]["env"]["custom_envs"])
    spec = specs["GuessTheNumber"]
    assert spec.cls is GuessTheNumber and spec.window.mode == "observation_window" and spec.window.window == 19
    assert make_env(spec.cls, spec.env_config, "k").max_turns == 20
    assert make_env(specs["LC"].cls, specs["LC"].env_config, "k").dataset.size == 30


def test_an_episode_through_the_agent_loop_shows_the_earlier_hints():
    spec = parse_custom_envs({"G": {"env_type": "game:GuessTheNumber-v0", "max_steps": 20, "prompt_mode": "observation_window", "history_length": 20,
                                    "agent_template": "Observation:\n{history}\n{current_observation}Answer in \\boxed{{}}."}})["G"]
    engine = ScriptedEngine(["\\boxed{10}", "\\boxed{15}", "\\boxed{13}"])  # seed 0's secret is 13
    renderer = TurnRenderer(TOK, CHATML_TEMPLATE)
    [traj] = run_episodes([EnvSlot(GuessTheNumber(), spec, 0, "g0", -0.5)], engine, SamplingParams(), renderer, LoopLimits(2048, 64), "s")
    assert [t.reward for t in traj.turns] == [0.0, 0.0, 1.0] and traj.done and traj.success
    last = TOK.decode(engine.calls[2][0].input_ids[0][engine.calls[2][0].attention_mask[0] > 0])
    rules = GuessTheNumber().reset(0)
    assert (f"Observation:\n{rules}\nGuess 1: 10 is too low; the secret number is higher than 10.\n"
            "Guess 2: 15 is too high; the secret number is lower than 15.\nGive your next guess.Answer") in last
    # the game's suffix follows the current observation only, as ROLL's StepConcatEnvManager writes it
    assert last.count("Give your next guess.") == 1
    # an unreadable guess: GEM's -0.1 and the entry's format penalty, and the episode is over
    engine = ScriptedEngine(["no idea"])
    [traj] = run_episodes([EnvSlot(GuessTheNumber(), spec, 0, "g0", -0.5)], engine, SamplingParams(), renderer, LoopLimits(2048, 64), "s")
    assert [t.reward for t in traj.turns] == [pytest.approx(-0.6)] and traj.done and not traj.success


# reasoning-gym's letter_counting as GEM 0.0.4 serves it: gem.make("rg:letter_counting", size=500,
# seed=42).reset(seed=s) for s = 0 and 7
LETTERS = {0: ('How many times does the letter "i" appear in the text: "To them we are indebted for"?', "1"),
           7: ('How many times does the letter "f" appear in the text: "the Americans What more do you want Besides we will pay for what"?', "1")}


def test_rg_letter_counting_serves_gems_item_for_the_seed_and_scores_the_boxed_answer():
    pytest.importorskip("reasoning_gym")
    env = make_env(env_class("rg:letter_counting", "k"), {"size": 500, "seed": 42}, "k")
    for seed, (question, answer) in LETTERS.items():
        assert env.reset(seed) == question
        assert env.step(f"I count \\boxed{{{answer}}}") == ("", 1.0, True, {"action_is_valid": True, "success": True})
        env.reset(seed)
        assert env.step("\\boxed{7}") == ("", 0.0, True, {"action_is_valid": True, "success": False})
        env.reset(seed)
        assert env.step("it is 1") == ("", 0.0, True, {"action_is_valid": False, "success": False})
        env.reset(seed)  # GEM falls back to an \fbox only without any \boxed, and then reads no answer from it
        assert env.step(f"\\fbox{{{answer}}}") == ("", 0.0, True, {"action_is_valid": False, "success": False})
        env.reset(seed)
        assert env.step(f"\\boxed{{{answer}}} \\fbox{{7}}")[1] == 1.0
    # the dataset's own scorer: reasoning-gym's default gives partial credit len(truth) / len(answer)
    backward = make_env(env_class("rg:spell_backward", "k"), {"size": 10, "seed": 1}, "k")
    backward.reset(3)
    truth = backward.item["answer"]
    assert backward.step(f"\\boxed{{{truth}}}")[1] == 1.0
    other = make_env(env_class("rg:letter_counting", "k"), {"size": 500, "seed": 43}, "k")
    assert [other.reset(s) for s in range(5)] != [env.reset(s) for s in range(5)]  # env_config's seed makes the dataset
    small = make_env(env_class("rg:letter_counting", "k"), {"size": 3, "seed": 42}, "k")
    assert {small.reset(s) for s in range(40)} == {env.dataset[i]["question"] for i in range(3)}  # size: the items to pick from


def test_rg_names_and_arguments_are_checked():
    pytest.importorskip("reasoning_gym")
    with pytest.raises(ConfigError, match=r"k: reasoning-gym has no dataset 'letter_count'; its datasets: \[.*'letter_counting'"):
        env_class("rg:letter_count", "k")
    with pytest.raises(ConfigError, match=r"k.env_config: size must be an integer >= 1, got 0"):
        make_env(env_class("rg:letter_counting", "k"), {"size": 0}, "k")
    with pytest.raises(ConfigError, match=r"unexpected keyword argument 'min_words'"):
        make_env(env_class("rg:letter_counting", "k"), {"min_words": 3}, "k")
    with pytest.raises(ConfigError, match=r"rg:NAME \(a reasoning-gym dataset\)"):
        env_class("nosuchenv", "k")


def test_rg_without_the_package_names_what_to_install(monkeypatch):
    monkeypatch.setattr(reasoning_gym_env, "_CLASSES", {})
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)
    monkeypatch.setitem(sys.modules, "reasoning_gym.factory", None)
    with pytest.raises(ConfigError, match=r"k: rg:letter_counting is a dataset of the reasoning-gym package, which is not installed: pip install 'posttrain\[reasoning-gym\]'"):
        env_class("rg:letter_counting", "k")
