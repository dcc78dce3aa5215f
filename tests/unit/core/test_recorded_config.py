"""A cell's config read back from results.json as the typed RunConfig (rlbench.core.config_files.recorded_config):
the same values the file holds, and a file whose config does not validate refused naming the file and key."""
import json

import pytest

from support.cli import rlbench
from support.report_runs import make_ablation

from rlbench.analysis.data import load
from rlbench.analysis.speedup import predict_cells, speedup_frame
from rlbench.core.config import RunConfig
from rlbench.core.config_files import recorded_config
from rlbench.core.errors import UserError
from rlbench.core.results import schema


def _edit_config(cell_dir, edit) -> None:
    res = json.loads((cell_dir / schema.RESULTS).read_text())
    edit(res["config"])
    schema.atomic_write_json(cell_dir / schema.RESULTS, res)


def _dict_reads(res: dict) -> dict:
    """What the analysis read from the raw dict before it read the typed config, with its fallbacks."""
    cfg = res.get("config") or {}
    eng, ro, tr, run = (cfg.get(k) or {} for k in ("engine", "rollout", "train", "run"))
    return {"schedule": eng.get("schedule", "?"), "rollout_devices": int(eng.get("rollout_devices") or 1),
            "train_devices": int(eng.get("train_devices") or 1), "max_staleness": int(eng.get("max_staleness", 1) or 0),
            "partial_rollout": bool(eng.get("partial_rollout")), "resume_kv": eng.get("resume_kv") or "recompute",
            "overlap": eng.get("overlap", True) is not False, "shared_prompt": bool(eng.get("shared_prompt")),
            "max_num_seqs": int(ro.get("max_num_seqs") or 16), "group_size": int(ro.get("group_size") or 1),
            "micro_batch_size": int(tr.get("micro_batch_size") or ro.get("group_size") or 1),
            "backend": ro.get("backend"), "seed": run.get("seed"), "interleave": bool(run.get("interleave")),
            "turn_group": run.get("turn_group")}


def _typed_reads(cfg: RunConfig) -> dict:
    eng = cfg.engine
    return {"schedule": eng.schedule, "rollout_devices": eng.rollout_devices, "train_devices": eng.train_devices,
            "max_staleness": eng.max_staleness, "partial_rollout": eng.partial_rollout, "resume_kv": eng.resume_kv,
            "overlap": eng.overlap, "shared_prompt": bool(eng.shared_prompt), "max_num_seqs": cfg.rollout.max_num_seqs,
            "group_size": cfg.rollout.group_size, "micro_batch_size": cfg.train.micro_batch_size,
            "backend": cfg.rollout.backend, "seed": cfg.run.seed, "interleave": cfg.run.interleave,
            "turn_group": cfg.run.turn_group}


@pytest.mark.e2e
def test_typed_config_of_a_real_run_is_the_recorded_one(async_ladder_run):
    """Every cell of a real tiny run: the typed config dumps back to exactly the recorded dict, so each typed
    read returns what the dict lookup returned."""
    run_dir, _ = async_ladder_run
    cells = schema.load_run(run_dir)
    assert len(cells) == 3
    for res in cells:
        cfg = recorded_config(res)
        assert cfg.model_dump(mode="json") == res["config"]
        assert _typed_reads(cfg) == _dict_reads(res)
    assert {recorded_config(r).engine.schedule for r in cells} == {"sync", "periodic_async"}


def test_typed_reads_equal_the_dict_reads_on_a_written_run(tmp_path):
    run_dir = make_ablation(tmp_path / "abl")
    run = load(run_dir)
    for c in run.cells:
        assert _typed_reads(c.config) == _dict_reads(c.result)
        assert c.config is c.config  # validated once per cell
    frame = speedup_frame(run)
    assert list(frame["cell"]) == ["periodic_async"] and frame["predicted_speedup"][0] > 0
    assert {r["cell"] for r in predict_cells(run)} == {"sync", "periodic_async"}


def test_a_misspelled_config_key_exits_2_naming_the_file_and_key(tmp_path):
    run_dir = make_ablation(tmp_path / "abl")
    _edit_config(run_dir / "periodic_async", lambda cfg: cfg["engine"].update(max_stalenes=2))
    proc = rlbench("report", run_dir, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert str(run_dir / "periodic_async" / schema.RESULTS) in proc.stderr
    assert "config.engine.max_stalenes: unknown key" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_removed_key_says_what_replaced_it_and_a_renamed_one_reads_as_its_new_name(tmp_path):
    run_dir = make_ablation(tmp_path / "abl")
    cell = run_dir / "sync"
    _edit_config(cell, lambda cfg: cfg["engine"].update(backend=cfg["engine"].pop("launcher")))
    res = schema.load_cell(cell)
    assert "launcher" not in res["config"]["engine"] and recorded_config(res).engine.launcher == "local"
    _edit_config(cell, lambda cfg: cfg["engine"].update(train_ranks=2))
    with pytest.raises(UserError, match=r"config\.engine\.train_ranks: removed: .*engine\.train_devices"):
        recorded_config(schema.load_cell(cell))


def test_a_results_dict_without_a_config_is_refused():
    with pytest.raises(UserError, match="no `config` mapping"):
        recorded_config({"cell": "sync", "iterations": []})
