"""The reference on devices of its own through the real command: GRPO with a KL loss, the trainer in
one process and the reference in a crew of its own (cluster.device=cpu: each "device" is a CPU
process), trains what the colocated run trains step by step; a crew process that dies stops the run
with one message naming it, and the rerun resumes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from cli_run_helpers import posttrain

from posttrain.models.tiny import make_tiny_model
from posttrain.tasks import write_task_data

CONFIG = """
data: {{train_files: {d}/train.parquet, train_batch_size: 4, max_prompt_length: 32, max_response_length: 6}}
model: {{path: {m}}}
algorithm: {{adv_estimator: grpo}}
rollout: {{n: 2}}
actor: {{ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 8, use_kl_loss: true, kl_loss_coef: 0.1, optim: {{lr: 1e-2}}}}
cluster: {{device: cpu}}
trainer: {{total_training_steps: 3, save_freq: 1, logger: [console, jsonl]}}
"""
KEYS = ("actor/kl_loss", "actor/pg_loss", "actor/grad_norm", "critic/score/mean", "response_length/mean")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("refcrew")
    make_tiny_model(root / "model", layers=1, hidden=32, heads=4, seed=0)
    make_tiny_model(root / "teacher", layers=1, hidden=32, heads=4, seed=1)  # another model, the same tokenizer
    write_task_data("sort", root / "data", train=16, test=4, sft=0, dpo=0)
    (root / "run.yaml").write_text(CONFIG.format(d=root / "data", m=root / "model"))
    return root


def train(inputs: Path, run: str, *overrides: str, kill: str = ""):
    args = ["train", str(inputs / "run.yaml"), f"trainer.default_local_dir={inputs / run}", *overrides]
    return posttrain(*args, cwd=inputs, env={"POSTTRAIN_TEST_KILL": kill}, fds=True)


def rows(inputs: Path, run: str) -> list[dict]:
    return [json.loads(line) for line in (inputs / run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def colocated(inputs) -> list[dict]:
    out = train(inputs, "colocated")
    assert out.returncode == 0, out.stderr[-3000:]
    return rows(inputs, "colocated")


def assert_same_steps(got: list[dict], expected: list[dict], tol: float = 1e-9) -> None:
    got, expected = [r for r in got if r["step"] > 0], [r for r in expected if r["step"] > 0]  # step 0: the start line
    assert [r["step"] for r in got] == [r["step"] for r in expected] == [1, 2, 3]
    assert expected[-1]["actor/kl_loss"] > 0  # the policy moved: the KL term has something to measure
    for mine, theirs in zip(got, expected):
        for key in KEYS:  # the same numbers; a crew process may run another thread count, hence the tolerance
            assert mine[key] == pytest.approx(theirs[key], rel=1e-6, abs=tol), (mine["step"], key)


@pytest.mark.slow
# a crew of two (FSDP2 over the crew) is left to `pytest -m long`: the CI budget keeps the one-process crew
@pytest.mark.parametrize("ref", ["[1]", pytest.param("[1,2]", marks=pytest.mark.long)])
def test_a_reference_crew_trains_what_the_colocated_reference_trains(inputs, colocated, ref):
    run = f"crew{ref.count(',') + 1}"
    out = train(inputs, run, "cluster.n_gpus_per_node=3", "cluster.device_mapping.actor=[0]", f"cluster.device_mapping.ref={ref}")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "the reference role on devices of its own, serving the trainer" in out.stdout
    assert_same_steps(rows(inputs, run), colocated)
    crew_log = (inputs / run / "workers" / "reference.log").read_text()
    processes = ref.count(",") + 1
    assert f"the reference crew ({processes} process(es)) answered 3 request(s) for log-probs" in crew_log
    if processes > 1:  # its own workers, sharded over both (FSDP2), each computing a share of the rows
        assert "2 worker processes on cpu" in crew_log and "each hosts reference (a reference crew" in crew_log


@pytest.mark.long  # two trainer processes (FSDP2) and the crew: left to `pytest -m long` for the CI budget
def test_a_crew_on_some_of_the_trainers_devices_trains_what_the_colocated_reference_trains(inputs, colocated):
    """ROLL's layout of the reference on the devices its engines leave free: the crew's process shares
    device 1 with trainer rank 1."""
    out = train(inputs, "inside", "cluster.n_gpus_per_node=2", "cluster.device_mapping.actor=[0,1]", "cluster.device_mapping.ref=[1]")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "the reference role on devices of its own, serving the trainer" in out.stdout
    assert_same_steps(rows(inputs, "inside"), colocated, tol=1e-6)  # two trainer ranks sum their gradients in another order
    assert "the reference crew (1 process(es)) answered 3 request(s) for log-probs" in (inputs / "inside" / "workers" / "reference.log").read_text()


@pytest.mark.slow
def test_a_crew_beside_a_split_explorer_trains_what_the_colocated_run_trains(inputs, colocated):
    # ROLL's usual layout for it: actor_train, actor_infer and reference each on devices of their own
    out = train(inputs, "split", "cluster.n_gpus_per_node=3", "cluster.device_mapping.actor=[0]", "cluster.device_mapping.rollout=[1]",
                "cluster.device_mapping.ref=[2]")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "decoupled run: trainer (pid" in out.stdout and "reference (pid" in out.stdout
    assert sorted(p.name for p in (inputs / "split" / "workers").glob("*.log")) == ["explorer.log", "reference.log", "trainer.log"]
    assert_same_steps(rows(inputs, "split"), colocated)


@pytest.mark.slow
def test_a_crew_serves_ref_model_path_s_teacher_as_the_colocated_reference_does(inputs):
    teacher = f"ref.model_path={inputs / 'teacher'}"
    out = train(inputs, "teacher-colocated", teacher)
    assert out.returncode == 0, out.stderr[-3000:]
    out = train(inputs, "teacher-crew", teacher, "cluster.n_gpus_per_node=2", "cluster.device_mapping.actor=[0]", "cluster.device_mapping.ref=[1]")
    assert out.returncode == 0, out.stderr[-3000:]
    crew, colocated = rows(inputs, "teacher-crew"), rows(inputs, "teacher-colocated")
    assert_same_steps(crew, colocated)
    assert crew[1]["actor/kl_loss"] > 0  # another model than the policy: a KL from the first step


@pytest.mark.slow
def test_a_crew_serves_ref_teachers_beside_the_reference_as_the_trainer_workers_do(inputs):
    """On-policy distillation's teachers (ROLL's teachers on devices of their own) in the crew, with the
    KL term's reference: the same numbers as both colocated."""
    teachers = ("algorithm.adv_estimator=on_policy_distill", f"ref.teachers={{t: {{model_path: {inputs / 'teacher'}, kl_coef: 0.5}}}}")
    out = train(inputs, "teachers-colocated", *teachers)
    assert out.returncode == 0, out.stderr[-3000:]
    out = train(inputs, "teachers-crew", *teachers, "cluster.n_gpus_per_node=2", "cluster.device_mapping.actor=[0]", "cluster.device_mapping.ref=[1]")
    assert out.returncode == 0, out.stderr[-3000:]
    crew, colocated = rows(inputs, "teachers-crew"), rows(inputs, "teachers-colocated")
    assert_same_steps(crew, colocated)
    assert [r["distill/t/row_fraction"] for r in crew if r["step"] > 0] == [1.0] * 3
    # each step: the reference's request and the teacher's
    assert "answered 6 request(s) for log-probs" in (inputs / "teachers-crew" / "workers" / "reference.log").read_text()


@pytest.mark.slow
def test_a_dead_crew_process_stops_the_run_naming_it_and_the_rerun_resumes(inputs, colocated):
    crew = ("cluster.n_gpus_per_node=2", "cluster.device_mapping.actor=[0]", "cluster.device_mapping.ref=[1]")
    start = time.monotonic()
    out = train(inputs, "killed", *crew, kill="reference:2:request")  # SIGKILL as it takes step 2's request
    assert out.returncode == 1, out.stderr[-3000:]
    assert "the reference crew process (rank 0 of 1) was killed by SIGKILL; the run stopped" in out.stderr
    assert "Traceback" not in out.stderr
    assert time.monotonic() - start < 90
    again = train(inputs, "killed", *crew)  # step 1's checkpoint: steps 2 and 3 again, with a new crew
    assert again.returncode == 0, again.stderr[-3000:]
    assert_same_steps(rows(inputs, "killed"), colocated)  # each step logged once, as the colocated run logged it


@pytest.mark.long  # 15 s of a 5 s request timeout and the launcher's watch; the dead-crew run covers the launcher's report
def test_a_hung_crew_process_is_named_once_the_trainer_s_request_times_out(inputs):
    start = time.monotonic()
    out = train(inputs, "hung", "cluster.n_gpus_per_node=2", "cluster.device_mapping.actor=[0]", "cluster.device_mapping.ref=[1]",
                "cluster.rpc_timeout_s=5", kill="reference:2:request:0:stop")  # SIGSTOP: alive, never answering
    assert out.returncode == 1, out.stderr[-3000:]
    assert ("the reference crew process (rank 0 of 1) stopped responding (its peers timed out waiting for it: "
            "cluster.rpc_timeout_s); the run stopped") in out.stderr
    trainer_log = (inputs / "hung" / "workers" / "trainer.log").read_text()
    assert "timed out waiting for the reference crew (cluster.device_mapping.ref) to answer a request" in trainer_log
    assert "Traceback" not in out.stderr
    assert time.monotonic() - start < 60
