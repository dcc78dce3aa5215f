"""run.interleave_pairs: the reference cell takes turns with one other cell at a time (for a model whose cells
would not all fit in memory), runs once per pair, and every ratio is read against the reference run of its
own pair. The cells, the turn groups, and the peers table and speedups of a hand-written paired run."""
import json

import pytest

from rlbench.core.config_files import load_config
from rlbench.core.errors import UserError
from rlbench.core.results import schema
from rlbench.run.ablation import cells_for, turn_groups
from support.report_runs import make_cell

PAIRS = ["run.interleave_pairs=true"]


def test_peers_in_pairs_run_sync_beside_each_other_cell():
    cells = cells_for("peers", load_config(None, PAIRS + ["train.adv_eps=1e-4"]), {})
    names = [n for n, _ in cells]
    others = ["periodic_async", "trl", "trl_cb", "trl_off_policy", "sync+tri_model+shared_prompt"]
    assert names == [n for o in others for n in (f"sync@{o}", o)]
    assert [cfg.run.turn_group for _, cfg in cells] == [o for o in others for _ in range(2)]
    assert all(cfg.run.interleave for _, cfg in cells)  # pairs take turns
    ref = dict(cells)
    assert ref["sync@trl"].engine == ref["sync@periodic_async"].engine and ref["sync@trl"].engine.schedule == "sync"
    todo = [({"name": n}, (n, cfg, None)) for n, cfg in cells]
    groups = turn_groups(todo, shared_ring=False)
    assert [[e["name"] for e, _ in g] for g in groups] == [[f"sync@{o}", o] for o in others]


def test_pairs_take_turns_and_need_a_second_cell():
    from rlbench.run.ablation import in_pairs

    assert all(cfg.run.interleave for _, cfg in cells_for("async", load_config(None, PAIRS), {}))
    with pytest.raises(UserError, match="nothing to pair"):
        in_pairs([("sync", load_config(None, PAIRS))])


def paired_run(root):
    """sync@periodic_async + periodic_async, sync@trl (its machine 2x slower) + trl (a peer cell, slower
    still): each pair's own sync run is its reference."""
    cells = [("sync@periodic_async", "sync", 1.0, "periodic_async"), ("periodic_async", "periodic_async", 1.0,
             "periodic_async"), ("sync@trl", "sync", 2.0, "trl"), ("trl", "sync", 3.0, "trl")]
    for name, schedule, scale, group in cells:
        folder = make_cell(root / name, name, schedule, iterations=6, scale=scale)  # 5 measured pairs: an interval
        res = json.loads((folder / schema.RESULTS).read_text())
        res["config"]["run"].update(interleave=True, interleave_pairs=True, turn_group=group)
        if name == "trl":
            res["switches"] = {"engine": "trl", "schedule": "trl", "tri_model": False, "shared_prompt": False,
                               "steps_per_generation": 1}
        schema.atomic_write_json(folder / schema.RESULTS, res)
    schema.atomic_write_json(root / schema.ABLATION, {
        "schema_version": schema.SCHEMA_VERSION, "kind": "ablation", "name": "peers", "reference": cells[0][0],
        "cells": [{"name": n, "dir": n, "switches": {}, "exit_code": 0} for n, *_ in cells]})
    return root


def test_every_ratio_is_against_the_sync_run_of_its_pair(tmp_path):
    from rlbench.analysis.data import load
    from rlbench.experiments.peers.analysis import peers_frame
    from rlbench.analysis.speedup import reference_of, speedup_frame, sync_twin

    run = load(paired_run(tmp_path / "run"))
    trl, pa = run.cell("trl"), run.cell("periodic_async")
    assert reference_of(run, trl).name == "sync@trl" and sync_twin(run, pa).name == "sync@periodic_async"
    sp = speedup_frame(run).set_index("cell")
    assert sp.loc["periodic_async", "measured_speedup"] == pytest.approx(pa.tpspd() / run.cell("sync@periodic_async").tpspd())
    frame = peers_frame(run).set_index("cell")
    pooled = "sync (2 runs, one per pair)"
    assert list(frame.index) == [pooled, "periodic_async", "trl"]
    assert frame.loc["trl", "vs_sync"] == pytest.approx(trl.tpspd() / run.cell("sync@trl").tpspd())  # 1/1.5
    assert frame.loc["trl", "against"] == "sync@trl" and frame.loc[pooled, "vs_sync"] == 1.0
    # the stages against its own pair's sync add up to the difference of the two totals
    sync_total = frame.loc["trl", "total_s_per_ktok"] - frame.loc["trl", "total_vs_sync"]
    ref_total = 1000 * sum(it["wall_s"] * it["devices"] for it in run.cell("sync@trl").measured()) / \
        sum(it["tokens"] for it in run.cell("sync@trl").measured())
    assert sync_total == pytest.approx(ref_total)
    parts = sum(frame.loc["trl", c] for c in frame.columns if c.endswith("_vs_sync") and c != "total_vs_sync")
    assert parts == pytest.approx(frame.loc["trl", "total_vs_sync"])
    tp = [it["tpspd"] for c in ("sync@periodic_async", "sync@trl") for it in run.cell(c).measured()]
    assert min(tp) == frame.loc[pooled, "tpspd_min"] and max(tp) == frame.loc[pooled, "tpspd_max"]
    # every iteration of the pair alike: an interval that lies below 1, and the sentence says slower
    from rlbench.experiments.peers.report import sentences

    said = next(s for s in sentences(frame.reset_index()) if "of trl" in s)
    assert said.startswith("rlbench's sync@trl reaches 1.50× the TPSPD of trl (95% interval ")
    assert ": faster than it." in said


@pytest.mark.e2e
def test_pairs_through_the_cli(tmp_path):
    """`rlbench run --ablation async --set run.interleave_pairs=true` on the tiny config: sync runs beside the
    barrier, then beside periodic-async; the two cells of a pair take turns iteration by iteration, and the
    second pair starts after the first ended (one machine state per ratio, two cells' processes at a time)."""
    from conftest import TINY
    from support.cli import rlbench

    proc = rlbench("run", "--config", TINY, "--ablation", "async", "--no-progress", "--out", str(tmp_path),
                   "--set", "run.interleave_pairs=true", "--set", "run.iterations=3", timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    names = ["sync@periodic_async_barrier", "periodic_async_barrier", "sync@periodic_async", "periodic_async"]
    cells = {e["name"]: schema.load_cell(run_dir / e["dir"]) for e in schema.read_ablation(run_dir)["cells"]}
    assert list(cells) == names and all(c["status"] == "complete" for c in cells.values())

    def windows(name):  # (start, end) of each iteration on the machine's monotonic clock
        c = cells[name]
        return [(c["clock_t0"] + it["start"], c["clock_t0"] + it["start"] + it["wall_s"]) for it in c["iterations"]]

    for a, b in ((names[0], names[1]), (names[2], names[3])):  # turns: iteration k of one, then of the other
        both = sorted([(s, e, a) for s, e in windows(a)] + [(s, e, b) for s, e in windows(b)])
        assert all(x[1] <= y[0] + 1e-6 for x, y in zip(both, both[1:]))
        order = [w[2] for w in both]
        assert all(x != y for x, y in zip(order, order[1:])), order
    first_end = max(e for n in names[:2] for _, e in windows(n))
    assert min(s for n in names[2:] for s, _ in windows(n)) > first_end
    assert "sync@periodic_async's TPSPD" in " ".join(proc.stdout.split("\n\n")[0].split())
