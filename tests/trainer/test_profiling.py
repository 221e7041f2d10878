"""Profiling of chosen RL steps (`profiler`, `<role>.profiler`): torch traces for exactly the chosen
steps and roles, with every phase of the step a named range; per-phase memory records; the report's
time breakdown; refusals of settings that would profile nothing; and no profiler at all when off.

Every run is `posttrain train` in-process on a 1-layer model and the sort task (as
tests/trainer/knob_harness.py), with a critic (gae) and a KL loss so that every phase runs.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from posttrain.cli import main
from posttrain.config.load import load_config
from posttrain.errors import ConfigError
from posttrain.models.tiny import make_tiny_model
from posttrain.tasks import write_task_data
from posttrain.trainer.profiling import StepProfiler, check_profiler_machine, profile_plan

PHASES = {"gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor", "sync"}
BASE = (
    "data.max_prompt_length=32", "data.max_response_length=6", "data.train_batch_size=4", "rollout.n=2",
    "actor.ppo_mini_batch_size=4", "actor.ppo_micro_batch_size_per_gpu=8", "critic.ppo_mini_batch_size=4",
    "critic.ppo_micro_batch_size_per_gpu=8", "trainer.logger=[jsonl]", "algorithm.adv_estimator=gae", "actor.use_kl_loss=true",
)
TORCH = ("profiler.tool=torch",)


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("profiling")
    make_tiny_model(root / "model", layers=1, hidden=32, heads=4, seed=0)
    write_task_data("sort", root / "data", train=12, test=4, sft=0, dpo=0)
    return root


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def train(assets: Path, run: Path, *overrides: str) -> tuple[int, str]:
    """(exit status, stderr) of `posttrain train` writing into `run`."""
    config = assets / "empty.yaml"
    config.write_text("{}\n")
    args = [f"model.path={assets / 'model'}", f"data.train_files={assets / 'data' / 'train.parquet'}", *BASE,
            f"trainer.default_local_dir={run}", *overrides]
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        status = main(["train", str(config), *args])
    return status, err.getvalue()


def files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def events(path: Path) -> list[dict]:
    return json.loads(path.read_text())["traceEvents"]


def ranges(path: Path) -> list[str]:
    """The `record_function` ranges of a Chrome trace, in order."""
    return [e["name"] for e in events(path) if e.get("cat") == "user_annotation"]


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_a_profiled_run_traces_exactly_the_chosen_steps_and_the_report_breaks_time_down(assets, tmp_path):
    run = tmp_path / "run"
    status, err = train(assets, run, "trainer.total_training_steps=3", *TORCH, "profiler.steps=[1,3]",
                        "actor.profiler.enable=true", "trainer.write_report=true")
    assert status == 0, err
    assert files(run / "profile") == ["e2e/step1_rank0.json", "e2e/step3_rank0.json"]
    for trace in ("step1_rank0.json", "step3_rank0.json"):
        named = ranges(run / "profile" / "e2e" / trace)
        assert PHASES <= set(named), PHASES - set(named)
        assert all(named.count(p) == 1 for p in PHASES)  # one step per trace
        assert not any("Input Dims" in e.get("args", {}) for e in events(run / "profile" / "e2e" / trace))  # no shapes asked
    report = (run / "report.html").read_text()
    assert 'id="time-breakdown"' in report and "time per step by phase: main" in report
    assert all(f">{p}</text>" in report for p in PHASES)  # the legend names every phase
    assert "model FLOPs utilisation (MFU)" in report


def test_continuous_steps_share_one_trace_under_save_path(assets, tmp_path):
    out = tmp_path / "traces"
    status, err = train(assets, tmp_path / "run", "trainer.total_training_steps=2", *TORCH, "profiler.steps=[1,2]",
                        "profiler.profile_continuous_steps=true", f"profiler.save_path={out}", "actor.profiler.enable=true",
                        "actor.profiler.contents=[cpu,shapes]")
    assert status == 0, err
    assert files(out) == ["e2e/step1-2_rank0.json"] and not (tmp_path / "run" / "profile").exists()
    assert ranges(out / "e2e" / "step1-2_rank0.json").count("gen") == 2
    assert any("Input Dims" in e.get("args", {}) for e in events(out / "e2e" / "step1-2_rank0.json"))  # contents: shapes


def test_discrete_traces_are_one_per_phase_of_each_enabled_role(assets, tmp_path):
    """The actor is not enabled: its phases (and the rollout's, which follows it) have no trace."""
    run = tmp_path / "run"
    roles = [f"{r}.profiler.{k}" for r in ("ref", "critic", "reward.reward_model") for k in ("enable=true", "discrete=true")]
    status, err = train(assets, run, "trainer.total_training_steps=2", *TORCH, "profiler.steps=[2]", *roles,
                        "critic.profiler.contents=[cpu,shapes]", "ref.profiler.contents=[memory]",
                        "reward.reward_model.profiler.contents=[shapes,memory]")
    assert status == 0, err
    traces = run / "profile"
    assert files(traces) == ["critic/step2_update_critic_rank0.json", "critic/step2_values_rank0.json",
                             "ref/step2_ref_rank0.json", "reward/step2_reward_rank0.json"]
    for path in traces.rglob("*.json"):
        phase = path.name.removeprefix("step2_").removesuffix("_rank0.json")
        assert phase in ranges(path) and not (PHASES - {phase}) & set(ranges(path))
    # contents: shapes -> operator input shapes, memory -> allocation events (stack: the subprocess test below)
    def has(path: str, arg: str) -> bool:
        return any(arg in e.get("args", {}) for e in events(traces / path))

    critic, ref, reward = "critic/step2_values_rank0.json", "ref/step2_ref_rank0.json", "reward/step2_reward_rank0.json"
    assert (has(critic, "Input Dims"), has(ref, "Input Dims"), has(reward, "Input Dims")) == (True, False, True)
    assert (has(critic, "Bytes"), has(ref, "Bytes"), has(reward, "Bytes")) == (False, True, True)


def test_torch_memory_records_every_phase_of_the_chosen_steps(assets, tmp_path):
    run = tmp_path / "run"
    status, err = train(assets, run, "trainer.total_training_steps=3", "profiler.tool=torch_memory", "profiler.steps=[1,2]",
                        "profiler.profile_continuous_steps=true", "actor.profiler.enable=true")
    assert status == 0, err
    assert files(run / "profile") == ["torch_memory/step1-2_rank0.json"]
    record = json.loads((run / "profile" / "torch_memory" / "step1-2_rank0.json").read_text())
    assert record["device"] == "cpu" and record["peak_is_exact"] is True  # Linux resets the RSS high-water mark
    assert {(p["step"], p["phase"]) for p in record["phases"]} == {(s, p) for s in (1, 2) for p in PHASES}
    for p in record["phases"]:
        assert p["peak_bytes"] >= p["rss_bytes"] > 50 * 2**20  # torch alone holds more than 50 MiB
        assert p["heap_in_use_bytes"] > 0 and p["mmapped_bytes"] >= 0


def test_the_cuda_memory_history_gets_the_torch_memory_options(monkeypatch, tmp_path):
    """The GPU path's first call, on the CPU: what torch.cuda.memory._record_memory_history receives."""
    from posttrain.trainer import profile_tools

    cfg = load_config(None, ["profiler.tool=torch_memory", "profiler.steps=[1]", "actor.profiler.enable=true",
                             "profiler.torch_memory.trace_alloc_max_entries=7", "profiler.torch_memory.context=state",
                             "profiler.torch_memory.stacks=python"])
    plan = profile_plan(cfg, 0, tmp_path, "cuda")
    calls = []
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", lambda **kw: calls.append(kw))
    profile_tools.MemoryRecord(plan).start(1)
    assert calls == [{"enabled": "all", "context": "state", "stacks": "python", "max_entries": 7}]


def test_torch_memory_named_alone_records_every_step_on_every_rank(tmp_path):
    """verl's global_profiler.tool=torch_memory with no steps and no role enabled: a snapshot of
    every rank after every update. posttrain: every step its own window, every rank, every phase."""
    from posttrain.config.dialects.verl_launch import launch

    native, report, _ = launch(None, ["global_profiler.tool=torch_memory", "actor_rollout_ref.model.path=/m"])
    assert report.refused == [] and "steps" not in native["profiler"]
    cfg = load_config(None, [f"profiler.tool={native['profiler']['tool']}", "cluster.n_gpus_per_node=2"])
    assert not cfg.profiler.steps and not cfg.actor.profiler.enable
    for rank in (0, 1):
        plan = profile_plan(cfg, rank, tmp_path, "cpu", total_steps=3)
        assert plan.windows == {1: 1, 2: 2, 3: 3} and plan.roles == {"actor", "rollout", "ref", "critic", "reward"}
    assert profile_plan(cfg, 0, tmp_path, "cpu", total_steps=3).out_dir == tmp_path / "profile"
    with pytest.raises(ConfigError, match="profiler.steps, which is empty"):  # torch needs chosen steps
        load_config(None, [*TORCH])
    profiler = StepProfiler.build(cfg, 1, tmp_path, "cpu", "main", total_steps=2)
    for step in (1, 2):
        with profiler.step(step), profiler.phase("gen"):
            pass
    assert files(tmp_path / "profile") == ["torch_memory/step1_rank1.json", "torch_memory/step2_rank1.json"]
    record = json.loads((tmp_path / "profile" / "torch_memory" / "step2_rank1.json").read_text())
    assert [(p["step"], p["phase"]) for p in record["phases"]] == [(2, "gen")]


ROLES = {"actor": ["rollout", "actor"], "ref": ["ref"], "critic": ["critic"], "reward.reward_model": ["reward"]}


@pytest.mark.parametrize("role", ROLES)
def test_ranks_and_all_ranks_choose_the_workers_that_profile_a_role(role, tmp_path):
    """verl's rule: all_ranks, else the listed ranks, else rank 0; the rollout follows the actor."""
    def profiled(*settings: str) -> list[list[str]]:
        cfg = load_config(None, [*TORCH, "profiler.steps=[1]", "cluster.n_gpus_per_node=4", f"{role}.profiler.enable=true",
                                 *(f"{role}.profiler.{s}" for s in settings)])
        plans = [profile_plan(cfg, rank, tmp_path, "cpu") for rank in range(4)]
        return [sorted(p.roles) if p else [] for p in plans]

    names = sorted(ROLES[role])
    assert profiled() == [names, [], [], []]
    assert profiled("ranks=[1,3]") == [[], names, [], names]
    assert profiled("all_ranks=true") == [names] * 4


def test_a_window_opens_at_the_first_step_still_to_run_and_closes_on_failure(tmp_path):
    cfg = load_config(None, [*TORCH, "profiler.steps=[1,2,3]", "profiler.profile_continuous_steps=true", "actor.profiler.enable=true"])
    calls = []

    class Tool:
        def start(self, step):
            calls.append(("start", step))

        def stop(self, first, last):
            calls.append(("stop", first, last))

        def phase(self, step, name):
            calls.append(("phase", step, name))
            return contextlib.nullcontext()

    profiler = StepProfiler(profile_plan(cfg, 0, tmp_path, "cpu"), Tool())
    with profiler.step(2):  # resumed after step 1
        profiler.phase("gen")
    with pytest.raises(RuntimeError), profiler.step(3):
        raise RuntimeError("a failed step")
    with profiler.step(4):
        profiler.phase("gen")  # not a profiled step: no range
    assert calls == [("start", 2), ("phase", 2, "gen"), ("stop", 2, 3)]


@pytest.mark.parametrize("overrides, message", [
    (("actor.profiler.enable=true", "profiler.steps=[1]"), "actor.profiler.enable, profiler.steps set but profiler.tool is null"),
    ((*TORCH, "actor.profiler.enable=true"), "profiler.steps, which is empty"),
    ((*TORCH, "profiler.steps=[1]"), "no role has profiler.enable"),
    (("profiler.tool=npu", "profiler.steps=[1]", "actor.profiler.enable=true"), "no Ascend NPU support"),
    ((*TORCH, "profiler.steps=[1]", "actor.profiler.enable=true", "actor.profiler.discrete=true", "ref.profiler.enable=true"),
     "must agree on discrete"),
    ((*TORCH, "profiler.steps=[1,2]", "actor.profiler.enable=true", "actor.profiler.discrete=true", "profiler.profile_continuous_steps=true"),
     "choose one"),
    (("profiler.tool=torch_memory", "profiler.steps=[1]", "actor.profiler.enable=true", "actor.profiler.contents=[shapes]"),
     "actor.profiler.contents ['shapes'] are what a torch trace records"),
    (("profiler.tool=torch_memory", "profiler.steps=[1]", "actor.profiler.enable=true", "actor.profiler.discrete=true"),
     "discrete applies to profiler.tool=torch"),
    ((*TORCH, "profiler.steps=[1]", "critic.profiler.enable=true", "critic.profiler.ranks=[2]", "cluster.n_gpus_per_node=2"),
     "critic.profiler.ranks [2]: the run has 2 worker process(es)"),
    ((*TORCH, "profiler.steps=[1]", "actor.profiler.enable=true", "algorithm.kind=sft"), "profiles RL steps only"),
])
def test_settings_that_would_profile_nothing_or_contradict_are_refused(overrides, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, list(overrides))
    assert message in str(err.value)


def test_what_this_machine_lacks_is_refused_before_the_run(assets, tmp_path):
    cfg = load_config(None, [*TORCH, "profiler.steps=[1]", "actor.profiler.enable=true", "actor.profiler.contents=[cpu,cuda]"])
    with pytest.raises(ConfigError, match="actor.profiler.contents: cuda traces GPU kernels, and this run computes on the CPU"):
        check_profiler_machine(cfg, "cpu")
    status, err = train(assets, tmp_path / "run", "profiler.tool=nsys", "profiler.steps=[1]", "actor.profiler.enable=true")
    assert status == 2 and "profiler.tool=nsys: Nsight Systems traces NVIDIA GPUs, and this run computes on the CPU" in err
    assert "Traceback" not in err


def test_steps_the_stage_does_not_have_are_refused_and_stages_get_their_own_directory(assets, tmp_path):
    status, err = train(assets, tmp_path / "run", "trainer.total_training_steps=2", *TORCH, "profiler.steps=[2,3]",
                        "actor.profiler.enable=true")
    assert status == 2 and "profiler.steps [3]: stage main has 2 training step(s); profile steps 1..2" in err
    cfg = load_config(None, [*TORCH, "profiler.steps=[1]", "actor.profiler.enable=true", f"profiler.save_path={tmp_path}"])
    assert profile_plan(cfg, 0, tmp_path / "run", "cpu").out_dir == tmp_path
    assert profile_plan(cfg, 0, tmp_path / "run", "cpu", stage="grpo").out_dir == tmp_path / "grpo"  # stages do not overwrite


def test_verl_profiler_keys_translate_and_unused_tool_options_are_dropped(tmp_path):
    from posttrain.config.dialects import read_foreign

    path = tmp_path / "verl.yaml"
    path.write_text(
        "actor_rollout_ref:\n  model: {path: /m}\n  actor:\n    profiler:\n      enable: true\n      tool: torch\n"
        "      ranks: [0]\n      tool_config:\n        torch: {discrete: true, contents: [cpu, shapes]}\n"
        "        nsys: {discrete: false}\n  rollout:\n    profiler: {enable: true}\n"
        "global_profiler:\n  tool: torch\n  steps: [2, 3]\n  profile_continuous_steps: false\n  save_path: outputs/profile\n"
        "  global_tool_config:\n    torch_memory: {trace_alloc_max_entries: 100000, stack_depth: 32}\n"
        "trainer: {profile_steps: null}\n"
    )
    foreign = read_foreign(path)
    assert foreign.report.refused == []
    assert foreign.native["profiler"]["tool"] == "torch" and foreign.native["profiler"]["steps"] == [2, 3]
    assert foreign.native["actor"]["profiler"] == {"enable": True, "ranks": [0], "discrete": True, "contents": ["cpu", "shapes"]}


# A run with profiling off, in a fresh interpreter: torch.profiler.profile must never be made and
# posttrain's profiling tools never imported (torch itself imports torch.profiler on `import torch`).
# The same interpreter then runs a profiled run, the probe's own check: it does see a profiler when
# there is one (after the unprofiled run, so that the first check saw a process that had never
# profiled). The profiled run records Python stacks (contents: stack) there: torch's Python tracer
# can deadlock when it starts while other Python threads run, as they do in a long pytest process.
PROBE = """
import json, sys
import torch.profiler
made = []
init = torch.profiler.profile.__init__
def counting_init(self, *a, **k):
    made.append(1)
    init(self, *a, **k)
torch.profiler.profile.__init__ = counting_init
torch.set_num_threads(1)
from posttrain.cli import main
for args in json.loads(sys.argv[1]):
    made.clear()
    status = main(args)
    print(json.dumps({"status": status, "made": len(made), "tools": "posttrain.trainer.profile_tools" in sys.modules}))
"""


def test_a_run_without_profiling_makes_no_profiler(assets, tmp_path):
    (tmp_path / "empty.yaml").write_text("{}\n")
    on = [*TORCH, "profiler.steps=[1]", "actor.profiler.enable=true", "actor.profiler.contents=[cpu,stack]"]
    runs = [["train", str(tmp_path / "empty.yaml"), f"model.path={assets / 'model'}", f"data.train_files={assets / 'data' / 'train.parquet'}",
             *BASE, "trainer.total_training_steps=1", f"trainer.default_local_dir={tmp_path / name}", *extra]
            for name, extra in (("off", []), ("on", on))]
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(runs)], capture_output=True, text=True, timeout=600)
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"status"')]
    assert len(results) == 2, done.stderr[-2000:]
    off, on = results
    assert off["status"] == 0 and on["status"] == 0, done.stderr[-2000:]
    assert (off["made"], off["tools"]) == (0, False)
    assert on["made"] > 0 and on["tools"]
    # contents: stack -> the Python frames of the step
    assert any(e.get("cat") == "python_function" for e in events(tmp_path / "on" / "profile" / "e2e" / "step1_rank0.json"))


def test_verl_nsys_discrete_lands_on_the_enabled_roles(tmp_path):
    # run_qwen2-7b_rm_seq_balance_nsys.sh: actor and critic profiled, nsys discrete, continuous steps
    # (which discrete mode leaves with nothing to join, in verl too)
    from posttrain.config.dialects import verl_launch

    line = ["global_profiler.tool=nsys", "global_profiler.steps=[1,2]", "global_profiler.profile_continuous_steps=True",
            "global_profiler.global_tool_config.nsys.discrete=True", "actor_rollout_ref.actor.profiler.enable=True",
            "critic.profiler.enable=True"]
    native, report, _ = verl_launch.launch(None, line)
    assert report.refused == []
    assert (native["actor"]["profiler"]["discrete"], native["critic"]["profiler"]["discrete"]) == (True, True)
    assert "discrete" not in native.get("ref", {}).get("profiler", {}) and "profile_continuous_steps" not in native["profiler"]
    off, report, _ = verl_launch.launch(None, [*line[:3], "actor_rollout_ref.actor.profiler.enable=True"])
    assert report.refused == [] and off["profiler"]["profile_continuous_steps"] is True
    assert not off["actor"]["profiler"].get("discrete", False)
