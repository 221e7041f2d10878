"""`posttrain --version` and `posttrain doctor`: versions, accelerators and optional packages, found
without importing the optional packages."""

from __future__ import annotations

import importlib.metadata as metadata
import subprocess
import sys

import torch

import posttrain
from posttrain.cli.doctor import extras, report_lines


def _version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def test_version_flag_prints_the_package_version():
    out = subprocess.run([sys.executable, "-m", "posttrain", "--version"], capture_output=True, text=True, timeout=120)
    assert (out.returncode, out.stdout.strip()) == (0, f"posttrain {posttrain.__version__}")


def test_doctor_reports_torch_cuda_engines_and_extras():
    lines = report_lines()
    assert lines[0].startswith(f"posttrain {posttrain.__version__} (")
    assert f"torch {torch.__version__} (CUDA build: {torch.version.cuda or 'none'})" in lines
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert any(line.startswith("CUDA: ") and f"{gpus} GPU" in line for line in lines)
    for name in ("ray", "vllm", "sglang"):
        assert any(line.startswith(f"{name}: {_version(name) or 'not installed'} (") for line in lines), name
    # every extra of pyproject.toml but the developer ones, with its state
    shown = {line.split(":")[0].strip(): line.split(":", 1)[1].strip() for line in lines if line.startswith("  ")}
    assert set(shown) == set(extras()) - {"test", "bench"} and {"wandb", "mlflow", "swanlab", "ray"} <= set(shown)
    for extra, requirements in extras().items():
        if extra in shown:
            complete = all(_version(r.name) is not None and r.specifier.contains(_version(r.name), prereleases=True) for r in requirements)
            assert (shown[extra] == "installed") == complete, extra


def test_doctor_imports_no_optional_package():
    code = ("import sys; from posttrain.cli import main; status = main(['doctor']); "
            "print(status, sorted(m for m in ('ray', 'vllm', 'sglang', 'wandb', 'mlflow', 'swanlab') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.splitlines()[-1] == "0 []", out.stdout + out.stderr


def test_an_incomplete_extra_names_what_is_missing(monkeypatch):
    from packaging.requirements import Requirement

    import posttrain.cli.doctor as doctor

    monkeypatch.setattr(doctor, "extras", lambda: {"tracking": [Requirement("torch>=1"), Requirement("no-such-package-posttrain>=1")],
                                                   "old": [Requirement(f"torch>={int(torch.__version__.split('.')[0]) + 1}")]})
    lines = doctor.report_lines()
    assert "  tracking: missing no-such-package-posttrain>=1" in lines
    assert f"  old: missing torch>={int(torch.__version__.split('.')[0]) + 1}" in lines  # installed, but too old
