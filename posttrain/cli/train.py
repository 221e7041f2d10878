"""`posttrain train CONFIG [key=value ...]`: run an experiment (all its stages).

Before the stages: the config's `prepare` section builds the tiny model and task data when they are
missing (posttrain.trainer.prepare). After them: where everything is, and for a run with a
validating RL stage the held-out accuracy before and after RL (posttrain.report.summary), then
`report.html` when trainer.write_report is set in the config or in any stage.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "train",
        help="run an experiment from a YAML config",
        description="Run every stage of CONFIG (SFT, RL, DPO), each from the previous stage's final policy. "
        "Rerunning the same command continues an interrupted run.",
    )
    p.add_argument("args", nargs="*", metavar="CONFIG|KEY=VALUE",
                   help="YAML config file, then dotted overrides, e.g. actor.optim.lr=1e-5 (with --dialect verl the file may be left out)")
    from posttrain.cli.sources import add_dialect_options

    add_dialect_options(p)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from posttrain.cli.sources import config_source
    from posttrain.config import load_config
    from posttrain.errors import ConfigError
    from posttrain.runlock import hold_run_lock

    args.config, args.overrides, args.dialect = config_source(args)
    if args.config is None and args.dialect is None:
        raise ConfigError("posttrain train: give a config file (or --dialect verl and a verl launch line's KEY=VALUE words)")
    cfg = load_config(args.config, args.overrides, dialect=args.dialect)
    # Imported once the config has loaded: the trainer pulls in transformers and torch.distributed
    # (~4 s), which a config that does not load should not make the user wait for.
    from posttrain.trainer.run import run_directory

    if cfg.trainer.mode == "serve":  # beside a train run of the same directory: its own lock, in serve/
        with hold_run_lock(run_directory(cfg) / "serve"):
            return _serve(cfg)
    # One run per directory, held by this process for the whole command (workers it starts are let
    # in): a second command on the same directory is refused before it prepares or writes anything.
    with hold_run_lock(run_directory(cfg)):
        return _train(args, cfg)


def _serve(cfg) -> int:
    """trainer.mode serve (posttrain.trainer.serving): one RL stage's policy behind the endpoint."""
    from posttrain.checkpoint import checkpoint_root
    from posttrain.config import stage_configs
    from posttrain.errors import ConfigError
    from posttrain.trainer.run import run_directory
    from posttrain.trainer.serving import serve_forever

    stages = stage_configs(cfg)
    if len(stages) > 1:
        raise ConfigError("trainer.mode=serve serves one RL stage's policy; a config with stages is refused (serve a one-stage config)")
    base = run_directory(cfg)
    return serve_forever(stages[0].config, base, checkpoint_root(stages[0].config, base, stages[0].name, False))


def _train(args: argparse.Namespace, cfg) -> int:
    from posttrain.checkpoint import STAGE_COMPLETE
    from posttrain.cluster.launch import EXPLORER_ROLES, REFERENCE_ROLES, launch
    from posttrain.cluster.nsight import UNDER_NSYS_ENV
    from posttrain.errors import ConfigError
    from posttrain.config.access import engine_spans_workers, explorer_processes, training_devices
    from posttrain.config.access import is_decoupled
    from posttrain.trainer.decoupled import ROLE_ENV, explorer_devices, explores_alone
    from posttrain.cluster.placement import plan_world
    from posttrain.cluster.process_logs import configure_logging
    from posttrain.cluster.ray_launch import launch_ray
    from posttrain.cluster.world import World, join_world, leave_world, world_from_env
    from posttrain.config import stage_configs
    from posttrain.trainer.prepare import prepare, refuse_stage_prepare
    from posttrain.trainer.run import check_run, run, run_directory
    from posttrain.trainer.reference_crew import CREW_ENV, crew_devices, serve_reference

    world = world_from_env()  # set when this process is one of the workers a launcher started
    _explorer_env(cfg)
    configure_logging(cfg.log.level)  # every process of the run: the launcher and each worker
    argv = ["train", *(["--dialect", args.dialect] if args.dialect else []), *([args.config] if args.config else []), *args.overrides]
    with naming_config_source(args.config, () if args.dialect else args.overrides, cfg.stages):
        refuse_stage_prepare(cfg.stages)
        plan = plan_world(cfg)
        if world is None:
            prepare(cfg.prepare)  # once, before any worker starts
        stages = stage_configs(cfg)
        base = run_directory(cfg)
        nsys = _nsight_prefix(cfg, base) if world is None and UNDER_NSYS_ENV not in os.environ else None
        decoupled = any(is_decoupled(s.config) for s in stages)
        crew = crew_devices(cfg)  # the reference on devices of its own: a crew of processes beside the trainer
        if world is None and ROLE_ENV not in os.environ and CREW_ENV not in os.environ and (decoupled or crew):
            check_run(cfg)  # every check before the first step, before any process starts
            return _launch_halves(cfg, argv, base, decoupled, crew, nsys)
        serves_reference = os.environ.get(CREW_ENV) == "reference"
        explorer = explores_alone(cfg)  # its processes: one per engine, on the rollout's devices
        size = len(crew) if serves_reference else explorer_processes(cfg) if explorer else plan.size
        named = (dict(roles=REFERENCE_ROLES, log_name="reference_rank") if serves_reference else
                 dict(roles=EXPLORER_ROLES, log_name="explorer_rank") if explorer else {})
        if world is None and size > 1:
            check_run(cfg)  # every check before the first step, before any worker starts
            if plan.launcher == "ray":
                if nsys is not None:
                    raise ConfigError("trainer.worker_nsight_options: the Ray launcher (cluster.launcher: ray) runs the workers as Ray actors, "
                                      "which posttrain does not start itself; use cluster.launcher: local, or start the run under nsys yourself")
                from posttrain.cli import main  # each actor runs this command's main in-process

                # an explorer process's engine spans rollout.tensor_model_parallel_size GPUs, which its actor holds
                gpus = cfg.rollout.tensor_model_parallel_size if explorer else 1
                # an sglang engine over a group of workers' GPUs: they see their node's GPUs
                node_gpus = not explorer and not serves_reference and any(engine_spans_workers(s.config) for s in stages)
                return launch_ray(main, argv, dataclasses.replace(plan, size=size), base, cfg.cluster, cfg.log, gpus=gpus,
                                  node_gpus=node_gpus, **named)
            return launch(argv, size, base, plan.device, dict(cfg.cluster.env_vars), cfg.log, prefix=nsys,
                          devices=crew if serves_reference else explorer_devices(cfg) if explorer else training_devices(cfg), **named)
        if nsys is not None:  # this process computes alone: the same command again, under nsys
            check_run(cfg)
            return subprocess.call([*nsys(0), sys.executable, "-m", "posttrain", *argv])
        stage_dirs = [base / s.name for s in stages] if len(stages) > 1 else [base]
        was_complete = all((d / STAGE_COMPLETE).is_file() for d in stage_dirs)
        if world is None and plan.device == "cuda":  # one process on the GPU (n_gpus_per_node 1): say where once
            os.environ.setdefault("LOCAL_RANK", str((training_devices(cfg) or [0])[0]))  # cluster.device_mapping's device
            world = World(device="cuda")
            print(f"posttrain: 1 process on {world.torch_device} ({torch_cuda_name()})", flush=True)
        world = world or World(device=plan.device)
        if world.distributed:
            join_world(world, cfg.cluster.rpc_timeout_s)
        if serves_reference:  # a reference crew process: answer the trainer's requests until it stops
            from posttrain.trainer.rl_build import crew_reference

            serve_reference(stages[0].config, base, world, crew_reference)
            leave_world(world)
            return 0
        results = run(cfg, world)
        leave_world(world)
    if not world.is_main:
        return 0
    if was_complete:
        print(f"the run is complete: every stage of {base} had already finished, nothing was trained "
              f"(delete {base} or set trainer.default_local_dir to run it again)")
    for stage, r in zip(stages, results):
        if not stage.config.trainer.val_only:  # an evaluation-only stage's "final model" is its input
            print(f"final model: {r.final_model}")
    _print_summary(base, stages, results)
    return 0


def _launch_halves(cfg, argv: list[str], base: Path, decoupled: bool, crew: list[int] | None, nsys) -> int:
    """The processes of a run whose roles live apart: a decoupled run's trainer and explorer
    (posttrain.trainer.decoupled), and beside the trainer the reference crew when the reference has
    devices of its own (posttrain.trainer.reference_crew), each told what it is by its variables
    (and, with a crew, the others told that one serves them: they start none)."""
    from posttrain.cluster.launch import launch_halves
    from posttrain.config.access import training_devices
    from posttrain.trainer.decoupled import ROLE_ENV, explorer_devices
    from posttrain.trainer.reference_crew import CREW_ENV

    halves = {"trainer": {ROLE_ENV: "trainer"}, "explorer": {ROLE_ENV: "explorer"}} if decoupled else {"trainer": {}}
    devices = {"trainer": (training_devices(cfg) or [0])[0], "explorer": explorer_devices(cfg)[0]}
    names = {}
    if crew:
        halves = {half: {**extra, CREW_ENV: half} for half, extra in halves.items()} | {"reference": {CREW_ENV: "reference"}}
        devices["reference"] = crew[0]
        # one process is the crew's rank 0; several are a launcher's, which names the rank that failed
        names["reference"] = "the reference crew process (rank 0 of 1)" if len(crew) == 1 else "the reference crew (its launcher)"
    return launch_halves(argv, base, halves, cfg.log, prefix=nsys, devices=devices, helpers=("reference",) if crew else (), names=names)


def _nsight_prefix(cfg, base):
    """rank -> `nsys profile ...` prefix when trainer.worker_nsight_options asks for one (profiler.tool
    nsys over profiler.steps, in the base config or a stage's), else None; the processes started under
    it inherit UNDER_NSYS_ENV, so they run instead of wrapping themselves again. A process is started
    once for all its stages, so the stages that ask must agree on the options; each traced window of
    each of them is one capture range."""
    from posttrain.cluster.nsight import UNDER_NSYS_ENV, nsys_prefix
    from posttrain.config import stage_configs
    from posttrain.errors import ConfigError
    from posttrain.trainer.profiling import role_settings, trace_windows

    asked = [s.config for s in stage_configs(cfg) if s.config.trainer.worker_nsight_options
             and s.config.profiler.tool == "nsys" and s.config.profiler.steps]
    if not asked:
        return None
    options = dict(asked[0].trainer.worker_nsight_options)
    if any(dict(c.trainer.worker_nsight_options) != options for c in asked):
        raise ConfigError("trainer.worker_nsight_options: the stages that profile with nsys give different options, but each "
                          "process is started under nsys once for the whole run; give the same options to every such stage")
    windows = sum(len(set(trace_windows(list(c.profiler.steps), c.profiler.profile_continuous_steps).values())) for c in asked)
    if any(s.enable and s.discrete for c in asked for s in role_settings(c).values()):
        windows = None  # a capture range per phase (nsys discrete): `repeat`, a report each, no count to stop at
    save = asked[0].profiler.save_path
    out_dir = Path(save).expanduser() if save else base / "profile"
    try:
        prefix = nsys_prefix(options, windows, out_dir)
    except FileNotFoundError:
        raise ConfigError("trainer.worker_nsight_options: starting the workers under Nsight Systems needs the nsys program, "
                          "which is not on PATH on this machine; install Nsight Systems, or remove the options") from None
    out_dir.mkdir(parents=True, exist_ok=True)
    os.environ[UNDER_NSYS_ENV] = "1"
    return prefix


def _explorer_env(cfg) -> None:
    """explorer.env_vars, in this process when it explores: set before the run builds anything, so
    the engine, reward functions and the processes they start (reward pools, sandboxes) inherit
    them; a launcher of workers sets them before it starts them (they inherit them). The launcher of a
    decoupled run sets none: its trainer half must not inherit them, and its explorer half sets its own.
    The environment is the process's, for all its stages: stages must agree on the variables."""
    from posttrain.config import stage_configs
    from posttrain.config.sections.explorer import explorer_env
    from posttrain.errors import ConfigError
    from posttrain.config.access import is_decoupled
    from posttrain.trainer.decoupled import ROLE_ENV, half_of

    stages = [s.config for s in stage_configs(cfg)]
    if any(dict(c.explorer.env_vars) != dict(cfg.explorer.env_vars) for c in stages):
        raise ConfigError("explorer.env_vars: a stage gives other variables than the base config, but they are set in the "
                          "process for the whole run; give them once, in the base config")
    if any(is_decoupled(c) for c in stages) and ROLE_ENV not in os.environ:
        return
    halves = {half_of(c) for c in stages}
    os.environ.update(explorer_env(cfg, "trainer" if halves == {"trainer"} else None))


def torch_cuda_name() -> str:
    import torch

    return torch.cuda.get_device_name(torch.cuda.current_device())


@contextmanager
def naming_config_source(path: str | None, overrides: list[str], stages: list) -> Iterator[None]:
    """Config problems found after loading (by a stage's checks) name their source too, like
    load-time ones: the override that set a key they mention, else the config file."""
    from posttrain.config.overrides import locate
    from posttrain.errors import ConfigError

    try:
        yield
    except ConfigError as err:
        located = [p if p.startswith((f"{path}: ", "command line override ")) else locate(p, path, overrides, stages)
                   for p in err.problems]
        if located == err.problems:
            raise
        raise ConfigError(located) from None


def _tensorboard_dir(trainer, base) -> str:
    """Where TensorBoard's events are: trainer.tracker_kwargs' log_dir (or logdir/dir), else under the run."""
    kwargs = dict(trainer.tracker_kwargs)
    return str(kwargs.get("log_dir") or kwargs.get("logdir") or kwargs.get("dir") or base)


def _print_summary(base, stages, results) -> None:
    """Accuracy before/after RL, TensorBoard, the exported model and the report."""
    from posttrain.report import RunDirError, load_run, summary_lines, write_report

    try:
        run_stages = load_run(base)
    except RunDirError:  # no metrics.jsonl (jsonl not in trainer.logger): nothing to summarise
        run_stages = []
    for line in summary_lines(run_stages):
        print(line)
    print(f"run directory: {base}")
    for log_dir in dict.fromkeys(_tensorboard_dir(s.config.trainer, base) for s in stages if "tensorboard" in s.config.trainer.logger):
        print(f"TensorBoard logs: tensorboard --logdir {log_dir}")
    trained = [r for s, r in zip(stages, results) if not s.config.trainer.val_only]
    if trained:
        print(f"exported model (Hugging Face directory): {trained[-1].final_model}")
    if run_stages and any(s.config.trainer.write_report for s in stages):
        print(f"report: {write_report(base)}")
