"""A user reward file written to a tmp dir, as a user would write one (verl's signature)."""

import textwrap

import pytest

REWARD_SOURCE = textwrap.dedent(
    '''
    import os
    import time


    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        return 1.0 if solution_str.strip() == str(ground_truth) else 0.0


    def with_metrics(data_source, solution_str, ground_truth, extra_info=None):
        correct = solution_str == ground_truth
        result = {"score": float(correct), "acc": correct, "pred": solution_str}
        if extra_info and extra_info.get("with_length"):
            result["length"] = len(solution_str)
        return result


    def scaled(data_source, solution_str, ground_truth, extra_info=None, scale=1.0):
        return scale * (solution_str == ground_truth)


    def misbehave(data_source, solution_str, ground_truth, extra_info=None):
        if solution_str == "raise":
            raise ValueError("cannot parse answer")
        if solution_str == "hang":
            time.sleep(1000)
        if solution_str == "crash":
            os._exit(3)
        if solution_str == "nan":
            return float("nan")
        if solution_str == "none":
            return None
        if solution_str == "text":
            return "1.0"
        if solution_str == "nodict":
            return {"acc": 1.0}
        return 1.0


    NOT_A_FUNCTION = 3


    def two_args(solution_str, ground_truth):
        return 0.0
    '''
)


@pytest.fixture
def reward_file(tmp_path):
    path = tmp_path / "my_reward.py"
    path.write_text(REWARD_SOURCE)
    return str(path)
