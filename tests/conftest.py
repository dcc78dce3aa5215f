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


@pytest.fixture(scope="module")
def one_thread():
    """Tiny tensors: intra-op threads only add sync overhead (and stall badly on a busy machine)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def fixed_reward_trainer():
    """A Trainer whose groups always score [1, 0, 0, 1], so advantages are known."""
    import torch

    from rlbench.engines.trainer.trainer import Trainer

    class FixedReward(Trainer):
        def rewards(self, group, ground_truth):
            return torch.tensor([1.0, 0.0, 0.0, 1.0])

    return FixedReward


def fixed_groups():
    """Two seeded groups of 4 responses (lengths 3, 9, 5, 12) with prompts of 7 and 8 tokens."""
    import torch

    from rlbench.engines.rollout.base import Group

    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(2):
        prompt = torch.randint(3, 90, (7 + i,), generator=g).tolist()
        responses = [torch.randint(3, 90, (int(n),), generator=g).tolist() for n in (3, 9, 5, 12)]
        out.append(Group(i, prompt, responses, [[0.0] * len(r) for r in responses]))
    return out
