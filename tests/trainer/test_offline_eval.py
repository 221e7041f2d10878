"""`posttrain eval`: a file of generated responses scored per data source (verl's main_eval).

The files hold answers whose scores are known from the built-in scorers (posttrain/arithmetic: 1 for
the right integer, else 0; posttrain/sort: 1 when right, else 0.8 x the share of right positions,
-0.1 for a wrong length) or from a reward function written here, so every table number is exact.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from posttrain.cli import main
from posttrain.config import load_config
from posttrain.config.dialects.verl_eval import translate
from posttrain.trainer.offline_eval import EvalResult, SourceScore, evaluate_file, format_table

ARITH, SORT = "posttrain/arithmetic", "posttrain/sort"
ROWS = [
    # arithmetic: row means 1.0 and 0.0 -> 0.5 (pooling the 4 responses would give 0.25)
    {"data_source": ARITH, "responses": ["19"], "reward_model": {"ground_truth": "19"}},
    {"data_source": SORT, "responses": ["13359", "13395"], "reward_model": {"ground_truth": "13359"}},  # (1 + 0.48) / 2
    {"data_source": ARITH, "responses": ["1", "2", "3"], "reward_model": {"ground_truth": "7"}},
]
TABLE = [SourceScore(ARITH, 2, 4, 0.5), SourceScore(SORT, 1, 2, 0.74)]
REWARD = '''
def exact(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):
    weight = (extra_info or {}).get("weight", 1.0)
    if solution_str == "boom":
        raise ValueError("cannot parse")
    return weight * float(solution_str.strip() == ground_truth) + bonus
'''


def _parquet(path: Path, rows: list[dict]) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def _eval(tmp_path: Path, capsys, *args: str) -> tuple[int, str, str]:
    import os

    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        code = main(["eval", *args])
    finally:
        os.chdir(here)
    out, err = capsys.readouterr()
    return code, out, err


def _table(out: str) -> dict[str, tuple[int, int, float]]:
    """metric -> (rows, responses, score) from the printed table."""
    lines = [line.split() for line in out.splitlines() if line.startswith("test_score/")]
    return {name: (int(rows), int(responses), float(score)) for name, rows, responses, score in lines}


def test_two_data_sources_give_the_exact_table(tmp_path, capsys):
    gen = _parquet(tmp_path / "gen.parquet", ROWS)
    cfg = load_config(None, [f"eval.path={gen}"])
    result = evaluate_file(cfg)
    assert result.sources == TABLE and result.failures == 0
    assert result.metrics() == {f"test_score/{ARITH}": 0.5, f"test_score/{SORT}": 0.74}
    code, out, _ = _eval(tmp_path, capsys, f"eval.path={gen}")
    assert code == 0
    assert _table(out) == {f"test_score/{ARITH}": (2, 4, 0.5), f"test_score/{SORT}": (1, 2, 0.74)}


def test_verl_evaluation_yaml_with_a_custom_reward_function(tmp_path, capsys):
    (tmp_path / "my_reward.py").write_text(REWARD)
    rows = [
        {"src": "a", "gens": ["x", "y"], "ref": {"ground_truth": "x"}, "extra_info": {"weight": 2.0}},  # (2 + 0) / 2
        {"src": "b", "gens": "z", "ref": {"ground_truth": "z"}},  # one string: one response
    ]
    (tmp_path / "gen.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))  # parquet cannot mix list and str
    (tmp_path / "evaluation.yaml").write_text(
        "data:\n  path: gen.jsonl\n  prompt_key: prompt\n  response_key: gens\n  data_source_key: src\n  reward_model_key: ref\n"
        "custom_reward_function:\n  path: my_reward.py\n  name: exact\nray_kwargs:\n  ray_init:\n    num_cpus: null\n  timeline_json_file: null\n"
    )
    code, out, _ = _eval(tmp_path, capsys, "evaluation.yaml")
    assert code == 0 and _table(out) == {"test_score/a": (1, 2, 1.0), "test_score/b": (1, 1, 1.0)}
    # the launch line's words: verl's evaluation.yaml is the base, Hydra overrides on top (+ adds a key);
    # Ray's CPUs become a pool of that many scoring processes
    words = ["ray_kwargs.ray_init.num_cpus=1", "data.path=gen.jsonl", "data.response_key=gens", "data.data_source_key=src", "data.reward_model_key=ref",
             "custom_reward_function.path=my_reward.py", "custom_reward_function.name=exact", "+custom_reward_function.reward_kwargs={bonus: 1}"]
    code, out, _ = _eval(tmp_path, capsys, "--dialect", "verl", *words)
    assert code == 0 and _table(out) == {"test_score/a": (1, 2, 2.0), "test_score/b": (1, 1, 2.0)}


def test_a_verl_trainer_config_lends_its_reward_function(tmp_path, capsys):
    (tmp_path / "my_reward.py").write_text(REWARD)
    gen = _parquet(tmp_path / "gen.parquet", ROWS)
    (tmp_path / "ppo.yaml").write_text("actor_rollout_ref:\n  actor:\n    ppo_epochs: 1\n"
                                       "custom_reward_function:\n  path: my_reward.py\n  name: exact\n")
    code, out, _ = _eval(tmp_path, capsys, "ppo.yaml", f"eval.path={gen}")
    assert code == 0 and _table(out) == {f"test_score/{ARITH}": (2, 4, 0.5), f"test_score/{SORT}": (1, 2, 0.5)}


def test_reward_workers_score_the_data_sources_they_claim(tmp_path, capsys):
    (tmp_path / "my_reward.py").write_text(REWARD)
    gen = _parquet(tmp_path / "gen.parquet", ROWS)
    workers = f"reward.workers={{a: {{worker_cls: tasks, tag_included: [{ARITH}]}}, s: {{worker_cls: 'my_reward.py:exact', tag_included: [{SORT}], weight: 2.0}}}}"
    code, out, _ = _eval(tmp_path, capsys, f"eval.path={gen}", workers)
    assert code == 0 and _table(out) == {f"test_score/{ARITH}": (2, 4, 0.5), f"test_score/{SORT}": (1, 2, 1.0)}  # 2 x (1 + 0) / 2


def test_the_eval_keys_choose_the_columns(tmp_path, capsys):
    rows = [{**r, "other": ["0"], "source2": "b", "truth2": {"ground_truth": "0"}} for r in ROWS]
    gen = _parquet(tmp_path / "gen.parquet", rows)
    base = [f"eval.path={gen}", "reward.custom_reward_function.path=my_reward.py", "reward.custom_reward_function.name=exact"]
    (tmp_path / "my_reward.py").write_text(REWARD)
    _, out, _ = _eval(tmp_path, capsys, *base)
    assert _table(out) == {f"test_score/{ARITH}": (2, 4, 0.5), f"test_score/{SORT}": (1, 2, 0.5)}
    _, out, _ = _eval(tmp_path, capsys, *base, "eval.response_key=other")
    assert _table(out) == {f"test_score/{ARITH}": (2, 2, 0.0), f"test_score/{SORT}": (1, 1, 0.0)}
    _, out, _ = _eval(tmp_path, capsys, *base, "eval.data_source_key=source2")
    assert _table(out) == {"test_score/b": (3, 6, (1.0 + 0.5 + 0.0) / 3)}
    _, out, _ = _eval(tmp_path, capsys, *base, "eval.reward_model_key=truth2")
    assert _table(out) == {f"test_score/{ARITH}": (2, 4, 0.0), f"test_score/{SORT}": (1, 2, 0.0)}


def test_a_jsonl_file_and_the_output_files(tmp_path, capsys):
    gen = tmp_path / "gen.jsonl"
    gen.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    code, _, _ = _eval(tmp_path, capsys, f"eval.path={gen}", "--output", "t.json")
    written = json.loads((tmp_path / "t.json").read_text())
    assert code == 0 and written["scores"] == {f"test_score/{ARITH}": 0.5, f"test_score/{SORT}": 0.74}
    assert written["table"][1] == {"data_source": SORT, "rows": 1, "responses": 2, "test_score": 0.74}
    code, _, _ = _eval(tmp_path, capsys, f"eval.path={gen}", "-o", "t.csv")
    assert code == 0 and (tmp_path / "t.csv").read_text() == (
        f"data_source,rows,responses,test_score\n{ARITH},2,4,0.5\n{SORT},1,2,0.74\n")


def test_verl_ray_cpus_become_a_pool_and_other_keys_are_dropped_or_refused():
    native, report = translate({"ray_kwargs": {"ray_init": {"num_cpus": 3}, "timeline_json_file": "t.json"},
                                "data": {"prompt_key": "p", "use_shm": True}})
    assert native == {"reward": {"reward_manager": "parallel", "num_workers": 3}} and report.counts() == "1 keys translated, 3 dropped, 0 refused"
    native, report = translate({"ray_kwargs": {"ray_init": {"num_cpus": None, "address": "auto"}}, "trainer": {"x": 1}})
    assert native == {}
    assert report.refused[0].line().startswith("ray_kwargs.ray_init.address: posttrain eval starts no Ray cluster")
    assert report.refused[1].line().startswith("trainer.x: not a key of verl's evaluation config")


def test_config_convert_reads_an_evaluation_yaml_as_one(tmp_path, capsys):
    gen = _parquet(tmp_path / "gen.parquet", [{**r, "gens": r["responses"]} for r in ROWS])
    (tmp_path / "evaluation.yaml").write_text(f"data:\n  path: {gen}\n  response_key: gens\n")
    assert main(["config", "convert", str(tmp_path / "evaluation.yaml"), str(tmp_path / "native.yaml")]) == 0
    capsys.readouterr()
    code, out, _ = _eval(tmp_path, capsys, "native.yaml")  # data.response_key is the responses column, not SFT's
    assert code == 0 and _table(out) == {f"test_score/{ARITH}": (2, 4, 0.5), f"test_score/{SORT}": (1, 2, 0.74)}


def test_failures_under_on_error_fixed_are_counted(tmp_path, capsys):
    (tmp_path / "my_reward.py").write_text(REWARD)
    gen = _parquet(tmp_path / "gen.parquet", [{"data_source": "a", "responses": ["boom", "x"], "reward_model": {"ground_truth": "x"}}])
    code, out, _ = _eval(tmp_path, capsys, f"eval.path={gen}", "reward.custom_reward_function.path=my_reward.py",
                         "reward.custom_reward_function.name=exact", "reward.on_error=fixed", "reward.failure_reward=-1")
    assert code == 0 and _table(out) == {"test_score/a": (1, 2, 0.0)}  # (-1 + 1) / 2
    assert "1 responses could not be scored" in out


@pytest.mark.parametrize("args, message", [
    ((), "eval.path: give the file of generated responses"),
    (("eval.path=missing.parquet",), "eval.path: missing.parquet: file not found"),
    (("eval.path=gen.txt",), "is not a parquet or jsonl file"),
    (("eval.path=gen.parquet", "eval.response_key=answers"),
     "gen.parquet: row 0 has no column 'answers'; its columns are ['bad_ref', 'data_source', 'responses', 'reward_model']; set eval.response_key"),
    (("eval.path=gen.parquet", "eval.reward_model_key=bad_ref"), "column 'bad_ref' is str '7', not an object with a 'ground_truth'"),
    (("eval.path=gen.parquet", "eval.response_key=reward_model"), "column 'reward_model' is dict {'ground_truth': '7'}; posttrain eval scores a list"),
    (("eval.path=gen.parquet", "reward.custom_reward_function.path=my_reward.py", "reward.custom_reward_function.name=exact"),
     "gen.parquet: reward function exact in "),
    (("eval.path=gen.parquet", "reward.custom_reward_function.path=nope.py"), "reward function file not found"),
    (("eval.path=gen.parquet", "--output", "t.txt"), "--output t.txt: write the table to a .json or .csv file"),
    (("--dialect", "verl", "data.path=gen.parquet", "data.nope=1"), "verl's evaluation config has no key data.nope"),
    (("eval.path=gen.parquet", "reward.reward_model.enable=true"), "reward.reward_model.enable: posttrain eval scores with the reward function"),
    (("eval.path=gen.parquet", "reward.workers={j: {worker_cls: llm_judge, tag_included: [t]}}"), "reward.workers.j: an LLM judge reads"),
    (("eval.path=gen.parquet", "reward.workers={w: {worker_cls: tasks, tag_included: [t]}}"),
     f"gen.parquet: row 0, column 'data_source': tag '{ARITH}' (the data.reward_fn_key column) is claimed by no reward worker"),
])
def test_bad_input_is_one_message_and_exit_2(tmp_path, capsys, args, message):
    (tmp_path / "my_reward.py").write_text(REWARD)
    _parquet(tmp_path / "gen.parquet", [{"data_source": ARITH, "responses": ["boom"], "reward_model": {"ground_truth": "7"}, "bad_ref": "7"}])
    code, out, err = _eval(tmp_path, capsys, *args)
    assert code == 2 and message in err and "Traceback" not in err, err


def test_a_data_source_without_a_scorer_names_the_known_ones(tmp_path, capsys):
    _parquet(tmp_path / "gen.parquet", [{"data_source": "openai/gsm8k", "responses": ["1"], "reward_model": {"ground_truth": "1"}}])
    code, _, err = _eval(tmp_path, capsys, "eval.path=gen.parquet")
    assert code == 2 and "gen.parquet: row 0, column 'data_source': no built-in scorer for data_source 'openai/gsm8k'" in err
    assert "posttrain/sort" in err and "set reward.custom_reward_function.path" in err


def test_the_printed_table():
    text = format_table(EvalResult("g.parquet", [SourceScore("a", 2, 4, 0.5)], failures=0))
    assert text == ("metric          rows  responses     score\n"
                    "test_score/a       2          4    0.5000\n")


def test_a_built_in_scorer_named_by_the_function_name_scores_any_data_source(tmp_path, capsys):
    # reward.custom_reward_function.name with no path: that built-in for every row (here think_answer:
    # accuracy + 0.1 for the think/answer layout, - 0.1 without it)
    _parquet(tmp_path / "gen.parquet", [{"data_source": "openai/gsm8k", "reward_model": {"ground_truth": "#### 72"},
                                         "responses": ["<think>48+24</think><answer>72</answer>", "72"]}])
    code, out, err = _eval(tmp_path, capsys, "eval.path=gen.parquet", "reward.custom_reward_function.name=think_answer")
    assert code == 0, err
    assert _table(out) == {"test_score/openai/gsm8k": (1, 2, 1.0)}  # (1.1 + 0.9) / 2
