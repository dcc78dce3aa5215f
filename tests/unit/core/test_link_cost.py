"""The link between nodes as a term of the cost model (core/costmodel/link.py): a transfer's
seconds, the terms a schedule pays per iteration once it spans nodes, and `rlbench simulate` /
`rlbench plan` pricing a stated link (the link's share of an iteration, sync on the nodes as a row
of its own)."""
from __future__ import annotations

import json

import pytest

from rlbench.core.costmodel.link import Link, NodeLayout, stated
from rlbench.core.costmodel.simulate import ASYNC, REF, simulate
from rlbench.core.errors import UserError
from rlbench.plan.command import run_plan
from rlbench.simulate import paper
from rlbench.simulate.sweep import format_text, run_simulation
from support.cli import rlbench
from support.plan_logs import verl_steps, write_verl_jsonl

LINK = Link(bytes_per_s=12.5e6, latency_s=0.005, overhead_s=0.02, source="test")  # 100 Mbit/s, 5 ms
W = 1e9  # 1 GB of weights


def test_a_transfer_is_its_fixed_part_and_its_bytes_at_the_rate():
    assert LINK.transfer_s(12.5e6) == pytest.approx(1.02)
    assert LINK.message_s(0) == pytest.approx(0.005)
    assert LINK.to_dict()["gbps"] == pytest.approx(0.1)


def test_terms_by_layout():
    one = NodeLayout(LINK, 8, W, 2000)
    assert one.terms(True, 4, 4) == {"allreduce": 0.0}  # 8 devices on one node: nothing crosses
    assert one.terms(False, 4, 4) == {"allreduce": 0.0}
    per_device = NodeLayout(LINK, 1, W, 2000)
    sync = per_device.terms(True, 2, 2)["allreduce"]  # ring over 4 nodes: 6 steps of W/4
    assert sync == pytest.approx(6 * (0.005 + W / 4 / 12.5e6))
    split = per_device.terms(False, 3, 1)
    assert split["weight_sync"] == pytest.approx(2 * (0.02 + W / 12.5e6))  # 3 rollout nodes: log2(4) rounds
    assert split["group_transfer"] == pytest.approx(2 * (0.02 + 2000 / 12.5e6))
    assert split["allreduce"] == 0.0  # one trainer node


def test_stated_link_and_its_errors():
    link = stated(0.1, 5.0)
    assert link.bytes_per_s == pytest.approx(12.5e6) and link.latency_s == pytest.approx(0.005)
    assert link.overhead_s == pytest.approx(0.010) and "--link-gbps 0.1" in link.source
    assert stated(None, None) is None
    for gbps, lat in ((0, None), (-1, None), (1, -2), (None, 3)):
        with pytest.raises(UserError):
            stated(gbps, lat)
    measured = stated(0.1, 5.0,
                      overhead_ms=26.7)  # a transfer's fixed part as `rlbench env` measured it
    assert measured.overhead_s == pytest.approx(0.0267) and measured.bytes_per_s == link.bytes_per_s
    assert measured.transfer_s(12.5e6) == pytest.approx(1.0267)
    for gbps, over in ((None, 1.0), (0.1, -1.0)):
        with pytest.raises(UserError):
            stated(gbps, None, overhead_ms=over)


def test_simulate_adds_the_link_to_every_iteration():
    batches = paper.paper_batches()
    layout = NodeLayout(LINK, 8, paper.WEIGHT_BYTES, 5000)
    for schedule, r, t in ((REF, 32, 32), (ASYNC, 32, 32)):
        alone, linked = simulate(batches, schedule, r, t), simulate(batches, schedule, r, t,
                                                                    layout=layout)
        extra = sum(linked.link_s.values())
        assert extra > 0 and linked.iter_s == pytest.approx(alone.iter_s + extra)
        assert linked.tpspd < alone.tpspd and linked.link_share == pytest.approx(extra / linked.iter_s)


def test_simulate_states_the_links_share(tmp_path):
    result = run_simulation(preset="paper-7b", devices=[8, 64], out=tmp_path, plots=False,
                            stated_link=stated(100.0, 0.01))
    assert result["link"]["gbps"] == pytest.approx(100) and result["link"]["devices_per_node"] == 1
    shares = {(r["devices"], r["schedule"], r["overlap"]): r["link_share"] for r in result["rows"]}
    assert 0 < shares[(8, "sync", True)] < shares[(64, "sync",
                                                   True)] < 1  # the ring grows with the nodes
    assert "link %" in format_text(result) and "100 Gbit/s" in format_text(result)


def test_plan_prices_a_stated_link(tmp_path):
    log = write_verl_jsonl(tmp_path / "m.jsonl", verl_steps(12, gpus=8))
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"hidden_size": 3584, "num_hidden_layers": 28,
                               "num_attention_heads": 28,
                               "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064}))
    plain = run_plan(log, gpus=64, model=cfg)
    slow = run_plan(log, gpus=64, model=cfg, stated_link=stated(10.0, 0.05))
    assert "link" not in plain and slow["link"]["devices_per_node"] == 8
    rows = {r["label"]: r for r in slow["rows"]}
    assert "sync (on the nodes)" in rows and rows["sync (on the nodes)"]["link_share"] > 0
    before = {r["label"]: r["tpspd"] for r in plain["rows"]}
    assert all(rows[k]["tpspd"] < v for k, v in before.items())  # every schedule pays the link
    err = rlbench("plan", log, "--link-gbps", "0")
    assert err.returncode == 2 and "--link-gbps" in err.stderr
