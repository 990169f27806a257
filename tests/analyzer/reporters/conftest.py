import sys
from pathlib import Path

# The hand-built findings and scenario traces shared with tests/cli.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cli"))
