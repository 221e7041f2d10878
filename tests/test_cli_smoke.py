import subprocess
import sys


def test_python_m_posttrain_help_lists_commands():
    out = subprocess.run([sys.executable, "-m", "posttrain", "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    for cmd in ("make-model", "make-data", "config"):
        assert cmd in out.stdout
