import os
import tempfile
from pathlib import Path

import pytest

# Tests never touch the user's model cache; one warm-start per test session is shared by all tests.
os.environ.setdefault("RLBENCH_CACHE", tempfile.mkdtemp(prefix="rlbench-test-cache-"))

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "configs" / "cpu-tiny.yaml"


@pytest.fixture(scope="session")
def tiny_config_path() -> Path:
    return TINY
