"""Multi-teacher on-policy distillation (ref.teachers): ROLL's routing of rows to teachers by tag,
the summed advantage, and a short run with two teachers on two domains."""

from __future__ import annotations

import pytest
import torch

from posttrain.algorithms import on_policy_distill_advantage, teacher_routes
from posttrain.config.checks import role_needs
from posttrain.config.load import load_config
from posttrain.errors import ConfigError
from posttrain.models.tiny import make_tiny_model
from posttrain.tasks import write_task_data
from rl_helpers import tiny_rl_files, tiny_rl_trainer


def test_rows_go_to_the_teachers_of_their_domain_and_an_untagged_teacher_takes_all():
    workers = {"math": ["gsm8k", "aime"]}  # a reward worker: its tags are one domain, as ROLL's domain_2_tag
    rows = teacher_routes(["gsm8k", "aime", "code", "chat"], [["gsm8k"], ["code"], []], workers)
    assert rows.int().tolist() == [[1, 1, 0, 0], [0, 0, 1, 0], [1, 1, 1, 1]]
    rows = teacher_routes(["gsm8k", "chat"], [["aime"], ["code"]], workers)
    assert rows.int().tolist() == [[1, 0], [0, 0]]  # aime's teacher takes the math domain's gsm8k row; chat: none


def test_a_row_s_advantage_is_the_sum_over_its_teachers_and_zero_without_one():
    s = torch.tensor([[-1.0, -2.0], [-0.5, -1.5], [-3.0, -1.0]])  # student
    t1 = torch.tensor([[-0.5, -1.0], [-1.0, -1.0], [-2.0, -2.0]])
    t2 = torch.tensor([[-2.0, -1.0], [-0.5, -0.5], [-1.0, -1.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    rows = torch.tensor([[True, True, False], [True, False, False]])  # row 0 both teachers, row 1 the first, row 2 none
    out = on_policy_distill_advantage(response_mask=mask, old_logprobs=s, teacher_logprobs=[t1, t2], teacher_rows=rows,
                                      teacher_coefs=[0.5, 2.0], ref_logprobs=None, kl_coef=7.0)
    # by hand: ROLL's -sum_i opd_kl_coef_i x (log s - log t_i) over the teachers routed to the row
    expected = torch.tensor([[0.5 * 0.5 + 2.0 * -1.0, 0.5 * 1.0 + 2.0 * 1.0],
                             [0.5 * -0.5, 0.0],  # masked token
                             [0.0, 0.0]])
    torch.testing.assert_close(out.advantages, expected)
    torch.testing.assert_close(out.returns, expected)
    one = on_policy_distill_advantage(response_mask=mask, old_logprobs=s, ref_logprobs=t1, kl_coef=0.5)
    all_rows = on_policy_distill_advantage(response_mask=mask, old_logprobs=s, teacher_logprobs=[t1], teacher_rows=torch.ones(1, 3, dtype=torch.bool),
                                           teacher_coefs=[0.5])
    torch.testing.assert_close(one.advantages, all_rows.advantages)  # one teacher on every row: the single-teacher formula


def _cfg(*overrides: str):
    return load_config(None, ["model.path=/m", "data.train_files=/d.parquet", *overrides])


def test_bad_teacher_settings_are_refused_by_key():
    with pytest.raises(ConfigError, match=r"ref.teachers.b.model_path: a teacher needs its model directory"):
        _cfg("algorithm.adv_estimator=on_policy_distill", "ref.teachers={a: {model_path: /t}, b: {tag_included: [x]}}")
    with pytest.raises(ConfigError, match="set adv_estimator on_policy_distill"):
        _cfg("algorithm.adv_estimator=grpo", "ref.teachers={a: {model_path: /t}}")
    with pytest.raises(ConfigError, match="ref.model_path and ref.teachers both"):
        _cfg("algorithm.adv_estimator=on_policy_distill", "ref.model_path=/t", "ref.teachers={a: {model_path: /t}}")
    with pytest.raises(ConfigError, match="each teacher has its own kl_coef"):
        _cfg("algorithm.adv_estimator=on_policy_distill", "algorithm.adv_estimator_args={kl_coef: 2.0}", "ref.teachers={a: {model_path: /t}}")
    cfg = _cfg("algorithm.adv_estimator=on_policy_distill", "ref.teachers={a: {model_path: /t}}")
    assert not role_needs(cfg).reference  # the teachers score the rows; no copy of the policy as reference
    assert role_needs(_cfg("algorithm.adv_estimator=on_policy_distill", "ref.teachers={a: {model_path: /t}}", "actor.use_kl_loss=true")).reference


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("teachers")
    out = tiny_rl_files(root, train=4)
    write_task_data("arithmetic", root / "other", train=4, test=0, sft=0, dpo=0, seed=2)
    for name, seed in (("t_sort", 7), ("t_arith", 11)):
        make_tiny_model(root / name, layers=1, hidden=32, heads=4, seed=seed)
    return out, root


def test_two_teachers_on_two_domains_train_two_steps_and_log(files):
    base, root = files
    train = f"data.train_files=[{root}/data/train.parquet,{root}/other/train.parquet]"
    t = tiny_rl_trainer(base, "algorithm.adv_estimator=on_policy_distill", train, "trainer.total_training_steps=2",
                        f"ref.teachers={{s: {{model_path: {root}/t_sort, tag_included: [posttrain/sort], kl_coef: 0.5}}, "
                        f"a: {{model_path: {root}/t_arith, tag_included: [posttrain/arithmetic]}}}}", run="two")
    assert t.roles.reference is None and set(t.roles.teachers) == {"s", "a"}
    seen = []
    update = t.roles.actor.update
    t.roles.actor.update = lambda batch, step=0, mini_size=None: seen.append(batch) or update(batch, step, mini_size)
    for step in (1, 2):
        metrics = t.step(t._next_prompts(step), step)
        assert metrics["distill/s/row_fraction"] + metrics["distill/a/row_fraction"] == pytest.approx(1.0)
        assert metrics["distill/untaught_row_fraction"] == 0.0
    # each row's advantage is its own domain's teacher's term, recomputed here from that teacher alone
    checked = set()
    for batch in seen:
        for name, coef, tag in (("s", 0.5, "posttrain/sort"), ("a", 1.0, "posttrain/arithmetic")):
            idx = [i for i, d in enumerate(batch.data_source) if d == tag]
            if not idx:
                continue
            checked.add(name)
            sub = batch[idx]
            teacher = t.roles.teachers[name].compute_logprobs(sub)
            expected = coef * (teacher - sub.old_logprobs) * sub.train_mask  # old_logprobs: the student before the update
            torch.testing.assert_close(sub.advantages, expected, atol=1e-5, rtol=1e-4)
            assert sub.advantages.abs().sum() > 0
    assert checked == {"s", "a"}


def test_a_teacher_tag_no_row_has_or_another_vocabulary_is_refused(files, tmp_path):
    base, root = files
    other = make_tiny_model(tmp_path / "big_vocab", layers=1, hidden=32, heads=4, vocab_size=160)
    with pytest.raises(ConfigError, match=r"ref.teachers.b.model_path .*its vocabulary differs"):
        tiny_rl_trainer(base, "algorithm.adv_estimator=on_policy_distill",
                        f"ref.teachers={{a: {{model_path: {root}/t_sort}}, b: {{model_path: {other}}}}}", run="vocab")
    with pytest.raises(ConfigError, match=r"ref.teachers.s.tag_included: \['posttrain/sorted'\] is in no row"):
        tiny_rl_trainer(base, "algorithm.adv_estimator=on_policy_distill",
                        f"ref.teachers={{s: {{model_path: {root}/t_sort, tag_included: [posttrain/sorted]}}}}", run="typo")
