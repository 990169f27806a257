"""``python -m npusan`` is the ``npusan`` command."""

import subprocess
import sys

import npusan


def test_python_dash_m_npusan_runs_the_cli(tmp_path):
    version = subprocess.run([sys.executable, "-m", "npusan", "--version"], capture_output=True, text=True)
    assert version.returncode == 0, version.stderr
    assert version.stdout.splitlines()[0] == f"npusan, version {npusan.__version__}"
    assert version.stdout.splitlines()[1].startswith("replay engine: ")
    missing = subprocess.run([sys.executable, "-m", "npusan", "analyze", str(tmp_path / "nope.npusan")],
                             capture_output=True, text=True)
    assert missing.returncode == 2 and missing.stderr.startswith("npusan: error: ")
