"""`posttrain doctor`: what this machine offers posttrain, to paste into a bug report.

It prints posttrain's and Python's versions, torch's build and the accelerators it sees, whether the
optional engines and launchers (Ray, vLLM, SGLang) are installed, and which of posttrain's optional
extras are complete. Optional packages are looked up in the installed distributions' metadata, never
imported (importing vLLM or Ray takes seconds and may start threads); only torch, a dependency, is
imported, to ask it about CUDA.
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import platform
import sys
from pathlib import Path

from packaging.requirements import Requirement

import posttrain

# Packages posttrain can use when present: (distribution name, what for)
OPTIONAL = (
    ("ray", "launcher: cluster.launcher ray"),
    ("vllm", "rollout engine; rollout.name vllm is not implemented yet, posttrain generates with hf"),
    ("sglang", "rollout engine; rollout.name sglang is not implemented yet, posttrain generates with hf"),
)
INTERNAL_EXTRAS = ("test", "bench")  # extras for developing posttrain, not for running it


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("doctor", help="print versions, accelerators and installed optional packages")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    for line in report_lines():
        print(line)
    return 0


def report_lines() -> list[str]:
    lines = [
        f"posttrain {posttrain.__version__} ({Path(posttrain.__file__).parent})",
        f"python {platform.python_version()} ({sys.executable})",
        *torch_lines(),
    ]
    for name, what in OPTIONAL:
        version = installed_version(name)
        lines.append(f"{name}: {version or 'not installed'} ({what})")
    lines.append("optional extras (pip install 'posttrain[NAME]'):")
    for extra, requirements in extras().items():
        if extra in INTERNAL_EXTRAS:
            continue
        missing = [str(r) for r in requirements if not satisfied(r)]
        state = "installed" if not missing else f"missing {', '.join(missing)}"
        lines.append(f"  {extra}: {state}")
    return lines


def torch_lines() -> list[str]:
    import torch

    lines = [f"torch {torch.__version__} (CUDA build: {torch.version.cuda or 'none'})"]
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        names = sorted({torch.cuda.get_device_name(i) for i in range(count)})
        lines.append(f"CUDA: available, {count} GPU{'s' if count != 1 else ''} ({', '.join(names)})")
    else:
        lines.append("CUDA: not available, 0 GPUs (posttrain runs on CPU)")
    return lines


def installed_version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def satisfied(requirement: Requirement) -> bool:
    version = installed_version(requirement.name)
    return version is not None and requirement.specifier.contains(version, prereleases=True)


def extras() -> dict[str, list[Requirement]]:
    """posttrain's optional extras and their requirements: from pyproject.toml when posttrain runs
    from a source checkout (the truth for this code), else from the installed distribution."""
    pyproject = Path(posttrain.__file__).resolve().parents[1] / "pyproject.toml"
    if pyproject.is_file():
        import tomllib

        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
        if project.get("name") == "posttrain":
            optional = project.get("optional-dependencies", {})
            return {extra: [Requirement(r) for r in reqs] for extra, reqs in optional.items()}
    try:
        dist = metadata.distribution("posttrain")
    except metadata.PackageNotFoundError:
        return {}
    out: dict[str, list[Requirement]] = {extra: [] for extra in dist.metadata.get_all("Provides-Extra") or []}
    for text in dist.requires or []:
        requirement = Requirement(text)
        for extra in out:
            if requirement.marker is not None and requirement.marker.evaluate({"extra": extra}):
                out[extra].append(Requirement(f"{requirement.name}{requirement.specifier}"))
    return out
