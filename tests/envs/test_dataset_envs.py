"""`roll_math` and `roll_qa` (posttrain.envs.dataset_envs): the row a seed picks, the grading, and the
plan-time check of the dataset."""

from __future__ import annotations

import json
import random

import datasets
import pytest

from posttrain.envs.dataset_envs import MathDatasetEnv, QaDatasetEnv, boxed_content, exact_match, normalize_answer
from posttrain.errors import DataError


@pytest.fixture()
def math_file(tmp_path):
    path = tmp_path / "math.jsonl"
    rows = [{"prompt": f"What is {i} + {i}?", "solution": str(2 * i)} for i in range(7)]
    rows.append({"prompt": "Half of one?", "solution": ["0.5", "1/2"]})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))  # a list answer beside text ones
    return str(path)


def test_a_seed_picks_the_row_rolls_dataset_actor_draws_for_it(math_file):
    env = MathDatasetEnv(dataset_name=math_file, question_key="prompt", answer_key="solution")
    for seed in (0, 1, 17, 2**31 - 1):
        i = random.Random(seed).randint(0, 7)  # python's generator seeded with the episode seed, one index drawn
        expected = "Half of one?" if i == 7 else f"What is {i} + {i}?"
        assert env.reset(seed) == expected
    assert len({env.reset(s) for s in range(40)}) > 4  # seeds spread over the rows


def test_math_grades_the_last_boxed_answer_with_math_verify(math_file):
    env = MathDatasetEnv(dataset_name=math_file, question_key="prompt", answer_key="solution")
    seed = next(s for s in range(100) if env.reset(s) == "What is 3 + 3?")
    env.reset(seed)
    assert env.step("first \\boxed{5}, no: \\boxed{6}") == ("", 1.0, True, {"action_is_valid": True, "success": True})
    env.reset(seed)
    assert env.step("\\boxed{6} then \\boxed{7}")[1:3] == (0.0, True)
    env.reset(seed)
    assert env.step("six") == ("", 0.0, True, {"action_is_valid": False, "success": False})
    env.reset(seed)
    assert env.step("\\boxed{6.0}")[1] == 1.0  # math-verify compares values, not strings
    half = next(s for s in range(100) if env.reset(s) == "Half of one?")
    for text, reward in (("\\boxed{\\frac{1}{2}}", 1.0), ("\\boxed{0.5}", 1.0), ("\\boxed{2}", 0.0)):
        env.reset(half)
        assert env.step(text)[1] == reward  # a list of answers: any of them


def test_boxed_content_reads_braces_only():
    assert boxed_content("a \\boxed{\\frac{1}{2}} b") == "\\frac{1}{2}"
    assert boxed_content("\\boxed{1} then \\fbox{2}") == "1"  # a boxed mark first, an fbox only without one
    assert boxed_content("only \\fbox{2}") is None
    assert boxed_content("\\boxed 3") is None and boxed_content("\\boxed{unclosed") is None


def test_qa_shuffles_with_its_seed_as_datasets_does_and_matches_normalised_answers(tmp_path):
    path = tmp_path / "qa.parquet"
    rows = [{"question": f"q{i}", "answer": [f"The answer {i}!", f"alt {i}"]} for i in range(9)]
    datasets.Dataset.from_list(rows).to_parquet(path)
    env = QaDatasetEnv(dataset_name=str(path), seed=4)
    order = datasets.Dataset.from_list(rows).shuffle(seed=4)["question"]
    for seed in (0, 3, 99):
        shown = env.reset(seed)
        q = order[random.Random(seed).randint(0, 8)]
        assert f"Question: {q}\n" in shown and "<answer>" in shown
        i = int(q[1:])
        assert env.step(f"<think>..</think><answer>wrong</answer> <answer>answer {i}</answer>")[1] == 1.0
        env.reset(seed)
        assert env.step(f"<answer>ALT {i}.</answer>")[1] == 1.0
        env.reset(seed)
        assert env.step(f"answer {i}") == ("", 0.0, True, {"action_is_valid": False, "success": False})
    other = QaDatasetEnv(dataset_name=str(path), seed=5)
    assert [other.reset(s) for s in range(6)] != [env.reset(s) for s in range(6)]  # env_config.seed changes the order
    boxed = QaDatasetEnv(dataset_name=str(path), seed=4, extract_boxed=True)
    boxed.reset(0)
    i = int(order[random.Random(0).randint(0, 8)][1:])
    assert boxed.step(f"\\boxed{{answer {i}}}")[1] == 1.0


def test_normalisation():
    assert normalize_answer("An  Apple, the Pear.") == "apple pear"
    assert exact_match("paris", "Paris") and exact_match("42", [42, "x"]) and not exact_match("4", ["42"])


def test_check_data_names_a_missing_dataset_or_column(math_file, tmp_path):
    with pytest.raises(DataError, match="neither local Hugging Face cache"):
        MathDatasetEnv.check_data({"dataset_name": "nobody/no-such-dataset-here"})
    with pytest.raises(DataError, match="data file not found"):
        MathDatasetEnv.check_data({"dataset_name": str(tmp_path / "gone.parquet")})
    with pytest.raises(DataError, match="no column 'problem'.*question_key"):
        MathDatasetEnv.check_data({"dataset_name": math_file})
    MathDatasetEnv.check_data({"dataset_name": math_file, "question_key": "prompt", "answer_key": "solution"})
    with pytest.raises(ValueError, match="mode 'val'"):
        MathDatasetEnv(dataset_name=math_file, mode="val")
