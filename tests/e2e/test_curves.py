"""`rlbench run --logger`: per-iteration curves under VERL's metric names, read back from the event files
(TensorBoard) and the offline run file (W&B) and compared with iterations.jsonl, which they must repeat."""
import importlib.util
import json
import re
import struct
from pathlib import Path

import pytest

from conftest import ROOT, TINY
from support.cli import rlbench

from rlbench.core.results import schema

HAS_WANDB = importlib.util.find_spec("wandb") is not None


@pytest.fixture(scope="module")
def logged_run(async_cell_run):
    """One periodic-async cell (trainer and rollout workers, queue_wait) of 3 iterations, curves on
    (conftest.py's shared run)."""
    run_dir, _ = async_cell_run
    (cell,) = schema.load_run(run_dir)
    return run_dir, cell


def tensorboard_scalars(run_dir: Path) -> dict[str, dict[str, dict[int, float]]]:
    """run -> tag -> step -> value, as `tensorboard --logdir <run_dir>/tensorboard` loads them."""
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    mux = EventMultiplexer(size_guidance={"scalars": 0}).AddRunsFromDirectory(str(run_dir / "tensorboard"))
    mux.Reload()
    return {run: {tag: {e.step: e.value for e in mux.Scalars(run, tag)} for tag in tags["scalars"]}
            for run, tags in mux.Runs().items()}


@pytest.mark.e2e
def test_tensorboard_curves_repeat_iterations_jsonl(logged_run):
    run_dir, cell = logged_run
    runs = tensorboard_scalars(run_dir)
    assert list(runs) == [cell["cell"]]  # one run per cell, named as the cell's folder
    tb = runs[cell["cell"]]
    its = schema.read_jsonl(run_dir / cell["cell"] / schema.ITERATIONS)
    assert len(its) == 3
    approx = lambda v: pytest.approx(v, rel=1e-6, abs=1e-9)  # event files hold float32
    assert set(tb["perf/throughput"]) == {1, 2, 3}  # step = iterations done, as VERL counts
    for it in its:
        step, st = it["iteration"] + 1, it["stage_s"]
        expected = {"perf/throughput": it["tpspd"], "perf/total_num_tokens": it["tokens"],
                    "timing_s/step": it["wall_s"], "timing_s/gen": st["rollout"], "timing_s/ref": st["ref_logprob"],
                    "timing_s/old_log_prob": st["old_logprob"], "timing_s/update_weights": st["weight_sync"],
                    "timing_s/update_actor": st["update"] + st["optimizer_step"],
                    "rlbench/timing_s/optimizer_step": st["optimizer_step"],
                    "rlbench/timing_s/queue_wait": st["queue_wait"], "critic/score/mean": it["reward_mean"],
                    "response_length/mean": it["response_len_mean"], "response_length/max": it["response_len_max"],
                    "actor/grad_norm": it["grad_norm"], "actor/kl_loss": it["kl"], "rlbench/actor/loss": it["loss"],
                    "rlbench/staleness/max": it["staleness_max"], "rlbench/warmup": int(it["warmup"]),
                    "rlbench/perf/rollout_tokens_per_s": it["rollout_tokens_per_s"],
                    **{f"rlbench/idle_frac/{w}": v for w, v in it["idle_frac"].items()}}
        assert {"trainer0", "rollout0"} <= set(it["idle_frac"])
        for tag, value in expected.items():
            assert tb[tag][step] == approx(value), tag
    val = tb["val-core/builtin/reward/mean@1"]  # before training (step 0) and after the last iteration
    assert val == {e["iteration"]: approx(e["accuracy"]) for e in cell["evals"]} and set(val) == {0, 3}


@pytest.mark.e2e
def test_every_curve_is_in_the_documented_table(logged_run):
    run_dir, cell = logged_run
    rows = [line.split("|")[1] for line in (ROOT / "docs" / "metrics.md").read_text().splitlines()
            if line.startswith("| `")]  # the table's first column: its tags
    documented = {tag for row in rows for tag in re.findall(r"`([^`]+)`", row)}
    tags = tensorboard_scalars(run_dir)[cell["cell"]]
    assert len(tags) > 20
    assert not {re.sub(r"idle_frac/.*", "idle_frac/<worker>", t) for t in tags} - documented


def wandb_records(path: Path) -> list:
    """The records of an offline W&B run file: a 7-byte header (':W&B', magic, version), then LevelDB's log
    format (32 KiB blocks of chunks: crc32c, length, type; a record is one FULL chunk or FIRST..LAST)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, block, records, buf, pos = path.read_bytes(), 32768, [], b"", 7
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        length, kind = struct.unpack("<HB", data[pos + 4:pos + 7])
        buf, pos = buf + data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind in (1, 4):  # FULL, LAST
            rec = pb.Record()
            rec.ParseFromString(buf)
            records.append(rec)
            buf = b""
    return records


@pytest.mark.skipif(not HAS_WANDB, reason="wandb is not installed (pip install wandb; it is in the dev extra)")
@pytest.mark.e2e
def test_wandb_offline_run_repeats_iterations_jsonl(logged_run):
    run_dir, cell = logged_run
    (path,) = (run_dir / "wandb" / cell["cell"]).glob("wandb/offline-run-*/run-*.wandb")
    records = wandb_records(path)
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert (run.project, run.run_group, run.display_name) == ("rlbench", run_dir.name, cell["cell"])
    history = {}
    for r in records:
        if r.WhichOneof("record_type") == "history":
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
            history[items["_step"]] = items
    assert sorted(history) == [0, 1, 2, 3]
    for it in schema.read_jsonl(run_dir / cell["cell"] / schema.ITERATIONS):
        h = history[it["iteration"] + 1]
        assert h["perf/throughput"] == it["tpspd"] and h["timing_s/gen"] == it["stage_s"]["rollout"]
        assert h["critic/score/mean"] == it["reward_mean"]
    assert history[0]["val-core/builtin/reward/mean@1"] == cell["evals"][0]["accuracy"]


def test_two_cells_are_two_runs_and_a_cell_run_again_replaces_its_curves(tmp_path):
    """What `tensorboard --logdir <run>/tensorboard` shows for two cells, and after `--resume` re-runs one."""
    from rlbench.core.config_files import load_config
    from rlbench.run.curves import Curves

    cfg = load_config(TINY, ["run.logger=tensorboard"])
    rec = {"iteration": 0, "tpspd": 10.0, "tokens": 20, "wall_s": 1.0, "reward_mean": 0.5, "response_len_mean": 3.0,
           "response_len_max": 4, "kl": 0.0, "grad_norm": 1.0, "loss": 0.1, "staleness_max": 0,
           "staleness_mean": 0.0, "rollout_tokens_per_s": 5.0, "train_tokens_per_s": 6.0, "warmup": False,
           "stage_s": {"rollout": 0.5, "handoff": 0.01}, "idle_frac": {"driver": 0.9}}
    for cell, tpspd in (("sync", 10.0), ("periodic_async", 30.0), ("sync", 20.0)):  # sync run twice
        curves = Curves(cfg, tmp_path / cell, cell)
        curves.iteration({**rec, "tpspd": tpspd})
        curves.close()
    runs = tensorboard_scalars(tmp_path)
    assert {run: tags["perf/throughput"] for run, tags in runs.items()} == {"sync": {1: 20.0},
                                                                          "periodic_async": {1: 30.0}}
    assert runs["sync"]["rlbench/timing_s/handoff"] == {1: pytest.approx(0.01)}
    assert "timing_s/update_actor" not in runs["sync"]  # no update stage recorded: nothing made up
    assert len(list((tmp_path / "tensorboard" / "sync").iterdir())) == 1


def test_loggers_config_key_and_option(tmp_path):
    from rlbench.core.config_files import load_config
    from rlbench.core.errors import UserError

    assert load_config(TINY, ["run.logger=wandb, tensorboard"]).run.logger == ["wandb", "tensorboard"]
    assert load_config(TINY, ["run.logger=[tensorboard, tensorboard]"]).run.logger == ["tensorboard"]
    assert load_config(TINY).run.logger == []
    with pytest.raises(UserError, match=r"run.logger: 'mlflow': allowed: tensorboard, wandb"):
        load_config(TINY, ["run.logger=mlflow"])
    proc = rlbench("run", "--config", str(TINY), "--logger", "tensorboard", "--logger", "tb", "--out", str(tmp_path))
    assert proc.returncode == 2 and "--logger tensorboard,tb: allowed: tensorboard, wandb" in proc.stderr
    proc = rlbench("run", "--engine", "verl", "--logger", "tensorboard", "--out", str(tmp_path))
    assert proc.returncode == 2 and "only with --engine rlbench" in proc.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("name", ["wandb", "tensorboard"])
def test_a_logger_that_is_not_installed_is_refused_before_any_work(tmp_path, name):
    proc = rlbench("run", "--config", str(TINY), "--logger", name, "--out", str(tmp_path),
                   prelude=f"sys.modules[{name!r}] = None")  # the import system now finds no such package
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"the {name} package is not installed" in proc.stderr and f"pip install {name}" in proc.stderr
    assert not list(tmp_path.iterdir())  # no run folder: refused before anything ran
