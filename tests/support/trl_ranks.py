"""One rank of tests/unit/engines/test_trl_loss.py's two-rank comparison, started by that test twice with torchrun's
variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) as the TRL adapter starts its ranks:

    python tests/support/trl_ranks.py POLICY_FOLDER OUT_FOLDER

TRL's GRPOTrainer (accelerate joins the gloo process group from the environment) and then rlbench's
data-parallel Trainer (on the same group) each take this rank's half of the fixed batch; what each has after
its all-reduce (loss, gradients, advantages, token count) goes to OUT_FOLDER/rank<r>.pt.
"""
import os
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS / "unit" / "engines"), str(TESTS)]  # test_trl_loss, and the conftest it imports


def main(folder: str, out: str) -> None:
    import torch

    torch.set_num_threads(1)
    from test_trl_loss import make_batch, rlbench_side, trl_side

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    batch = make_batch(Path(folder))
    trl = trl_side(batch, rank, world)  # first: accelerate initialises the process group
    ours = rlbench_side(batch, rank, world)
    keep = ("loss", "grads", "advantages", "tokens")
    torch.save({"trl": {k: trl[k] for k in keep}, "rlbench": {k: ours[k] for k in keep}},
               Path(out) / f"rank{rank}.pt")


if __name__ == "__main__":
    main(*sys.argv[1:])
