import os
import tempfile
from pathlib import Path

import pytest

# Tests never touch the user's model cache; one warm-start per test session is shared by all tests.
os.environ.setdefault("RLBENCH_CACHE", tempfile.mkdtemp(prefix="rlbench-test-cache-"))

TESTS = Path(__file__).resolve().parent  # conftest.py, support/, fixtures/; the tests in unit/, e2e/, meta/
ROOT = TESTS.parent
TINY = ROOT / "configs" / "cpu-tiny.yaml"
# cpu-tiny's short warm start leaves most rewards 0; 60 steps on one-step problems give mixed rewards in
# a few seconds (the warm start is cached for the session), so gradients are real.
LEARNS = ["model.warmstart_steps=60", "data.max_steps=1"]


# Under pytest-xdist (`-n 2 --dist loadgroup`) a file's tests go to one worker (its module-scoped runs are
# made once), and so do the files that share a session-scoped run.
_SHARED_RUNS = {"test_cli_run.py": "ladder", "test_placement.py": "ladder", "test_ray.py": "ladder",
                "test_recorded_config.py": "ladder", "test_decode_cost.py": "ladder",
                "test_seeds.py": "seeds", "test_seed_pool.py": "seeds",
                "test_curves.py": "cell", "test_hostcpu.py": "cell",
                "test_families.py": "families", "test_bounded_async.py": "families",
                "test_schedule_registry.py": "families"}


# The groups with the longest runs start first, longest first (their seconds in a run of the suite on a 2-core
# AMD EPYC, 2026-12-07: the ladder group with the Ray runs ~290, process hygiene ~190, the rest 50 to 10), so
# that neither process is left with one of them at the end while the other idles; the order of the tests
# inside a file is kept. The `slow` tier's (test_gpu_session.py's rehearsal) lead when it runs.
_LONGEST_FIRST = ("test_gpu_session.py", "test_ray_cluster.py",
                  "test_shipped_warmstart.py", "test_ray.py", "test_process_hygiene.py",
                  "test_trl_peer.py", "test_against.py", "test_compile.py", "test_trl_ablation.py",
                  "test_families.py", "test_regime.py", "test_equivalence.py", "test_accuracy_config.py",
                  "test_resume.py", "test_starting.py", "test_trl_loss.py", "test_watchdog.py",
                  "test_partial_rollout.py", "test_curves.py", "test_launch.py", "test_seed_pool.py",
                  "test_weight_file.py", "test_interleave_run.py", "test_pairs.py",
                  "test_vllm_runs.py", "test_vllm_cpu.py")  # the last two: .ci/run's vLLM step


def pytest_configure(config):
    """pytest-xdist deals the groups in the order of their number of tests (test_packing.py's 100-odd quick
    ones first, the GPU command's rehearsal last) unless told to keep the collection's order, which is
    _LONGEST_FIRST's (the option `--no-loadscope-reorder`, set here so that the README's command needs none)."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook in each worker, which reads the groups
def pytest_collection_modifyitems(config, items):
    _leave_out_slow(config, items)
    rank = {name: i for i, name in enumerate(_LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_SHARED_RUNS.get(item.path.name, item.path.name)))


def _leave_out_slow(config, items) -> None:
    """Tests marked `slow` (what measures rather than checks, the rebuild of a shipped artefact) run only
    where the marker expression names them (`-m slow`, `-m "slow or e2e"`): the default run and the inner
    loop (`-m "not e2e"`) leave them out, reported as deselected."""
    if "slow" in (config.option.markexpr or ""):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]


def train_engine(overrides: list[str], iterations: int = 3, placed: bool = True) -> dict:
    """build_schedule as the runner builds it (placed: pinned workers per core/devices/placement.py; else the
    in-process trainer); -> final params, samples, rewards and stage events of `iterations` iterations."""
    from rlbench.core.config_files import load_config
    from rlbench.core.devices import device as dev
    from rlbench.core.devices.placement import plan
    from rlbench.engines.data.source import load_dataset
    from rlbench.engines.factory import iteration_input, build_schedule
    from rlbench.engines.model.loader import load_policy
    from rlbench.core.record.stages import now

    cfg = load_config(TINY, LEARNS + ["engine.consume_order=dispatch", "engine.queue_timeout_s=120",
                                      f"run.iterations={iterations + 1}"] + overrides)
    dataset = load_dataset(cfg.data, cfg.run.seed)
    policy, tok, _ = load_policy(cfg, dataset)
    init = {n: p.detach().clone() for n, p in policy.named_parameters()}
    events = []
    placement = plan(cfg.engine, "cpu", dev.available("cpu")) if placed else None
    schedule, _ = build_schedule(cfg, policy, tok, now(), events.append, dev.resolve("cpu"), dataset=dataset,
                              placement=placement)
    samples, rewards = [], []
    try:
        for k in range(iterations):
            out = schedule.run_iteration(iteration_input(cfg, dataset, tok, k))
            samples += [(k, g.prompt_index, [tuple(r) for r in g.responses])
                        for g in sorted(out.groups, key=lambda g: g.prompt_index)]
            rewards.append(dict(sorted(out.rewards.items())))
            assert out.trained_version == k and all(g.version == k for g in out.groups)  # staleness 0
        params = {n: p.detach().clone() for n, p in schedule.trainer.policy.named_parameters()}
    finally:
        schedule.close()
    return {"params": params, "samples": samples, "rewards": rewards, "events": events, "init": init}


@pytest.fixture(scope="session")
def trained():
    """train_engine, each distinct call made once per session: the placed engines the equivalence tests of
    test_placement.py and test_ray.py compare against are the same runs (worker processes, ~10 s each).
    Callers only read what it returns."""
    done: dict = {}

    def get(overrides: list[str], iterations: int = 3, placed: bool = True) -> dict:
        key = (tuple(overrides), iterations, placed)
        if key not in done:
            done[key] = train_engine(overrides, iterations, placed)
        return done[key]

    return get


@pytest.fixture(scope="session")
def tiny_config_path() -> Path:
    return TINY


# The shared `--ablation async` run's overrides: a rollout long enough (lognormal lengths up to 64 tokens, 4
# sequences at a time) that periodic-async overlaps it with training; 4 iterations, one of them warm-up.
ASYNC_LADDER = ["rollout.response_length=lognormal", "rollout.response_length_mean=24", "rollout.max_new_tokens=64",
                "rollout.max_num_seqs=4", "run.iterations=4"]


@pytest.fixture(scope="session")
def async_ladder_run(tmp_path_factory):
    """`rlbench run --ablation async` of cpu-tiny with ASYNC_LADDER (sync, barrier, periodic-async), report
    on: the result files (test_cli_run.py) and the placement and overlap (test_placement.py) of one run
    instead of one each. -> (run folder, the completed process)."""
    from support.cli import only_run, rlbench, sets

    out = tmp_path_factory.mktemp("async-ladder")
    proc = rlbench("run", "--config", TINY, "--out", out, "--ablation", "async", "--no-progress", *sets(*ASYNC_LADDER))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return only_run(out), proc


@pytest.fixture(scope="session")
def two_seed_run(tmp_path_factory):
    """`rlbench run --ablation none --seeds 0,1` of cpu-tiny, 2 iterations, one-core cells (share_devices) on
    a two-core mask where there are two cores, so the seeds run side by side: the seeds' aggregation
    (test_seeds.py) and their placement side by side (test_seed_pool.py) of one run.
    -> (run folder, the completed process, the mask's cores or None)."""
    import subprocess

    from support.cli import argv, only_run, sets

    cores = sorted(os.sched_getaffinity(0))[:2]
    mask = ["taskset", "-c", ",".join(map(str, cores))] if len(cores) == 2 else []
    out = tmp_path_factory.mktemp("two-seeds")
    proc = subprocess.run([*mask, *argv("run", "--config", TINY, "--out", out, "--ablation", "none", "--seeds", "0,1",
                                        "--no-progress", *sets("engine.share_devices=true", "run.iterations=2"))],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return only_run(out), proc, cores if mask else None


# The shared `--ablation families` run: the six rungs on cpu-tiny with generation-bound iterations (decode made
# 3x slower, RLBENCH_SLOW) and a planted pause (RLBENCH_PAUSE) of FAMILIES_PAUSE_S before each iteration in
# FAMILIES_PAUSED: what an evaluation or another cell's turn does to a cell (test_families.py).
FAMILIES_PAUSE_S, FAMILIES_PAUSED, FAMILIES_ITERATIONS = 1.0, (2,), 4


@pytest.fixture(scope="session")
def families_run(tmp_path_factory):
    """`rlbench run --ablation families` as a user runs it: the ladder (test_families.py), and the one-step-off
    and bounded-staleness cells as a user runs them (test_schedule_registry.py, test_bounded_async.py) from
    one run instead of one each. -> (the completed process, run folder)."""
    from support.cli import only_run, rlbench

    out = tmp_path_factory.mktemp("families-cli")
    env = {"RLBENCH_PAUSE": f"{FAMILIES_PAUSE_S}@{','.join(map(str, FAMILIES_PAUSED))}", "RLBENCH_SLOW": "decode:3"}
    # cells one after another: the planted pause stands in for another cell's turn, alone (interleaved, every
    # iteration of a rollout-ahead cell would also be held through the other five cells' turns)
    proc = rlbench("run", "--config", TINY, "--ablation", "families", "--set", f"run.iterations={FAMILIES_ITERATIONS}",
                   "--set", "rollout.response_length=fixed", "--set", "run.interleave=false", "--out", out,
                   "--no-progress", env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, only_run(out)


@pytest.fixture(scope="session")
def async_cell_run(tmp_path_factory):
    """One periodic-async cell of cpu-tiny through the CLI (trainer and rollout workers, queue_wait), 3
    iterations, curves on (TensorBoard, and W&B where installed) and the report written: what the tests of
    what a run records read (test_curves.py, test_hostcpu.py), from one run instead of one each.
    -> (run folder, the completed process)."""
    import importlib.util

    from support.cli import only_run, rlbench

    out = tmp_path_factory.mktemp("async-cell")
    loggers = "tensorboard,wandb" if importlib.util.find_spec("wandb") else "tensorboard"
    proc = rlbench("run", "--config", TINY, "--ablation", "none", "--set", "engine.schedule=periodic_async",
                   "--logger", loggers, "--out", out, "--no-progress")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return only_run(out), proc


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


def default_sigint() -> None:
    """preexec_fn of a child that a test interrupts as a terminal's Ctrl-C would: SIGINT at its default,
    even when pytest itself runs as a background job (which starts with SIGINT ignored, and children
    inherit that)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
