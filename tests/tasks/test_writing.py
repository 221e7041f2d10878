import random
import re

import pyarrow.parquet as pq
import pytest

from posttrain.cli import main
from posttrain.errors import ConfigError
from posttrain.tasks import TASKS, compute_score, get_task, register_task, write_task_data

# the image task (colour) writes RL rows with images and no SFT/DPO files: tests/vision covers it
TEXT_TASKS = sorted(name for name, spec in TASKS.items() if spec.ability != "vision")


@pytest.mark.parametrize("task", TEXT_TASKS)
def test_verl_layout_and_every_row_scores_its_own_answer(tmp_path, task):
    paths = write_task_data(task, tmp_path, train=40, test=20, seed=1)
    train = pq.read_table(paths["train"]).to_pylist()
    test = pq.read_table(paths["test"]).to_pylist()
    sft = pq.read_table(paths["sft"]).to_pylist()
    assert (len(train), len(test), len(sft)) == (40, 20, 40)
    row = train[0]
    assert set(row) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    assert row["data_source"] == f"posttrain/{task}"
    assert row["prompt"] == [{"role": "user", "content": row["prompt"][0]["content"]}]
    assert row["reward_model"]["style"] == "rule"
    assert row["extra_info"]["split"] == "train" and row["extra_info"]["task"] == task
    assert [r["extra_info"]["index"] for r in test] == list(range(20))
    multi_turn = {"messages"} if task == "tool_calc" else set()  # a multi-turn task's SFT row holds the conversation too
    assert set(sft[0]) == {"data_source", "prompt", "response", "extra_info"} | multi_turn
    # The SFT response is a correct answer for its problem; prompts stay short for a char tokenizer.
    for r in sft:
        truth = _ground_truth_of(task, r["prompt"][0]["content"], r["response"])
        assert compute_score(r["data_source"], r["response"] + "<|im_end|>", truth)["acc"] == 1.0
    assert max(len(r["prompt"][0]["content"]) for r in train + test) <= 24


def _ground_truth_of(task, prompt, response):
    """Regenerate ground truth from a prompt (used to check SFT responses)."""
    if task == "sort":
        return "".join(sorted(prompt[1:-1]))
    if task in ("arithmetic", "tool_calc"):
        a, op, b = re.fullmatch(r"(\d+)([-+*])(\d+)=", prompt).groups()
        return str({"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op])
    numbers, target = prompt[:-1].split("->")
    return f'{{"numbers": [{numbers.replace(",", ", ")}], "target": {target}}}'


@pytest.mark.parametrize("task", TEXT_TASKS)
def test_test_prompts_are_distinct_and_never_in_train_or_sft(tmp_path, task):
    paths = write_task_data(task, tmp_path, train=300, test=100, seed=0)
    prompts = {split: [r["prompt"][0]["content"] for r in pq.read_table(p).to_pylist()] for split, p in paths.items()}
    assert len(set(prompts["test"])) == 100
    assert not set(prompts["test"]) & (set(prompts["train"]) | set(prompts["sft"]))


def test_same_seed_same_files_and_test_set_independent_of_train_size(tmp_path):
    a = write_task_data("sort", tmp_path / "a", train=30, test=10, seed=5)
    b = write_task_data("sort", tmp_path / "b", train=30, test=10, seed=5)
    c = write_task_data("sort", tmp_path / "c", train=60, test=10, seed=5)
    d = write_task_data("sort", tmp_path / "d", train=30, test=10, seed=6)
    read = lambda p: pq.read_table(p).to_pylist()  # noqa: E731
    assert read(a["train"]) == read(b["train"]) and read(a["sft"]) == read(b["sft"])
    assert read(a["test"]) == read(c["test"])
    assert read(a["test"]) != read(d["test"])


def test_options_system_prompt_and_no_sft(tmp_path):
    paths = write_task_data("arithmetic", tmp_path, train=50, test=5, sft=0, seed=0,
                            system_prompt="Answer only.", options={"digits": 1, "ops": ["*"]})
    assert "sft" not in paths and not (tmp_path / "sft_train.parquet").exists()
    rows = pq.read_table(paths["train"]).to_pylist()
    assert rows[0]["prompt"][0] == {"role": "system", "content": "Answer only."}
    for r in rows:
        a, b = r["prompt"][1]["content"][:-1].split("*")
        assert len(a) == len(b) == 1
    assert rows[0]["extra_info"]["options"] == '{"digits": 1, "ops": ["*"], "partial_credit": 0.0}'


def test_sort_length_option(tmp_path):
    rows = pq.read_table(write_task_data("sort", tmp_path, train=5, test=1, options={"length": 3})["train"]).to_pylist()
    assert all(len(r["reward_model"]["ground_truth"]) == 3 for r in rows)


def test_user_mistakes_are_config_errors():
    with pytest.raises(ConfigError, match="unknown task 'sortt'; known tasks: arithmetic, colour, countdown, sort"):
        get_task("sortt")
    with pytest.raises(ConfigError, match="task 'sort' has no option 'digits'; its options are: length"):
        write_task_data("sort", "/nonexistent", options={"digits": 2})
    with pytest.raises(ConfigError, match="--digits must be between 1 and 18"):
        write_task_data("arithmetic", "/nonexistent", options={"digits": 0})
    with pytest.raises(ConfigError, match="too few distinct problems"):
        write_task_data("arithmetic", "/nonexistent", train=10, test=101, options={"digits": 1})
    with pytest.raises(ConfigError, match="--train must be >= 0"):
        write_task_data("sort", "/nonexistent", train=-1)


def test_duplicate_registration_is_a_bug():
    with pytest.raises(ValueError, match="registered twice"):
        register_task("sort", description="x", ability="x", score=lambda *a: {"score": 0.0})(lambda rng: None)


def test_countdown_problems_are_solvable_with_their_response():
    spec = get_task("countdown")
    rng = random.Random(0)
    for _ in range(200):
        p = spec.draw(rng, spec.defaults)
        assert spec.score(p.response, p.ground_truth)["acc"] == 1.0


def test_cli_make_data_writes_the_files(tmp_path, capsys):
    assert main(["make-data", "arithmetic", str(tmp_path), "--train", "20", "--test", "5",
                 "--digits", "3", "--ops", "+", "-"]) == 0
    assert "posttrain/arithmetic" in capsys.readouterr().out
    rows = pq.read_table(tmp_path / "train.parquet").to_pylist()
    assert len(rows) == 20 and len(pq.read_table(tmp_path / "sft_train.parquet")) == 20
    assert {r["extra_info"]["options"] for r in rows} == {'{"digits": 3, "ops": ["+", "-"], "partial_credit": 0.0}'}


def test_cli_make_data_user_error_exits_2(tmp_path, capsys):
    assert main(["make-data", "arithmetic", str(tmp_path), "--digits", "0"]) == 2
    assert "--digits must be between 1 and 18" in capsys.readouterr().err


@pytest.mark.parametrize("task", TEXT_TASKS)
def test_dpo_pairs_chosen_is_right_rejected_is_wrong(tmp_path, task):
    paths = write_task_data(task, tmp_path, train=30, test=10, seed=2)
    pairs = pq.read_table(paths["dpo"]).to_pylist()
    held_out = pq.read_table(paths["dpo_test"]).to_pylist()
    assert (len(pairs), len(held_out)) == (30, 10)
    assert set(pairs[0]) == {"data_source", "prompt", "chosen", "rejected", "extra_info"}
    rl_test = pq.read_table(paths["test"]).to_pylist()
    # The held-out pairs are the RL test problems: never in any training file.
    assert [r["prompt"] for r in held_out] == [r["prompt"] for r in rl_test]
    train_prompts = {r["prompt"][0]["content"] for r in pairs}
    assert not train_prompts & {r["prompt"][0]["content"] for r in rl_test}
    for r in pairs + held_out:
        truth = _ground_truth_of(task, r["prompt"][0]["content"], r["chosen"])
        assert compute_score(r["data_source"], r["chosen"], truth)["acc"] == 1.0
        assert compute_score(r["data_source"], r["rejected"], truth)["acc"] == 0.0
        assert r["rejected"] != r["chosen"]


def test_dpo_rejected_answers_are_near_misses(tmp_path):
    sort = pq.read_table(write_task_data("sort", tmp_path / "s", train=50, test=5)["dpo"]).to_pylist()
    assert all(sorted(r["rejected"]) == sorted(r["chosen"]) for r in sort if len(set(r["chosen"])) > 1)
    arith = pq.read_table(write_task_data("arithmetic", tmp_path / "a", train=50, test=5)["dpo"]).to_pylist()
    assert all(abs(int(r["rejected"]) - int(r["chosen"])) == 1 for r in arith)


def test_dpo_count_zero_and_held_out_pairs_do_not_depend_on_dpo_count(tmp_path):
    none = write_task_data("sort", tmp_path / "a", train=20, test=5, dpo=0)
    assert "dpo" not in none and not (tmp_path / "a" / "dpo_train.parquet").exists()
    small = write_task_data("sort", tmp_path / "b", train=20, test=5, dpo=10)
    large = write_task_data("sort", tmp_path / "c", train=20, test=5, dpo=40)
    assert len(pq.read_table(small["dpo"])) == 10
    assert pq.read_table(small["dpo_test"]).to_pylist() == pq.read_table(large["dpo_test"]).to_pylist()
    with pytest.raises(ConfigError, match="--dpo must be >= 0"):
        write_task_data("sort", tmp_path / "d", dpo=-1)


def test_cli_make_data_dpo_option(tmp_path, capsys):
    assert main(["make-data", "sort", str(tmp_path), "--train", "20", "--test", "5", "--dpo", "7"]) == 0
    assert "7 DPO pairs" in capsys.readouterr().out
    assert len(pq.read_table(tmp_path / "dpo_train.parquet")) == 7
    assert len(pq.read_table(tmp_path / "dpo_test.parquet")) == 5


def test_a_multi_turn_task_writes_its_sft_conversation(tmp_path):
    [row] = pq.read_table(write_task_data("tool_calc", tmp_path, train=1, test=1, sft=1, seed=0)["sft"]).to_pylist()
    question, call, tool, answer = row["messages"]
    a, b = question["content"][:-1].split("*")
    assert (call["role"], tool["role"], answer["role"]) == ("assistant", "tool", "assistant")
    assert f'"expression": "{a}*{b}"' in call["content"] and tool["content"] == answer["content"] == str(int(a) * int(b))
