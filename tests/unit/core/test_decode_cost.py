"""The decode step priced by its shape (core/costmodel/decode.py): the bucket and window the sampler
runs a step at, the plane over the measured shapes, and the replay of a recorded sync cell against the step
costs it recorded."""
from __future__ import annotations

import collections

import numpy as np
import pytest

from rlbench.core.costmodel.decode import ShapeCost, StepCost, replay
from rlbench.engines.rollout.decode_step import WINDOW_ROUND, batch_buckets, layout


def plane_table(coef, shapes, steps=4, noise=None):
    """{(rows, window): [steps, seconds]} on the plane coef . (1, rows, window, rows x window)."""
    rng = np.random.default_rng(0)
    out = {}
    for b, w in shapes:
        mean = coef[0] + coef[1] * b + coef[2] * w + coef[3] * b * w
        if noise:
            mean *= 1 + noise * rng.standard_normal()
        out[(b, w)] = [steps, steps * mean]
    return out


@pytest.mark.parametrize("slots", [1, 6, 64, 600, 1100])
def test_pieces_are_the_samplers_layout(slots):
    buckets = batch_buckets(slots)
    cost = ShapeCost({}, buckets, WINDOW_ROUND, 512, slots)
    for active in range(1, slots + 1):
        assert cost.pieces(active) == [b - a for a, b in layout(active, buckets, slots)], active


def test_window_rounds_up_and_stops_at_the_cache():
    eager = ShapeCost({}, [1, 2, 4], WINDOW_ROUND, 200)
    assert [eager.window(r) for r in (1, 16, 17, 190, 200)] == [16, 16, 32, 192, 200]
    graphs = ShapeCost({}, [1, 2, 4], 0, 200)  # a captured step attends over the whole cache
    assert {graphs.window(r) for r in (1, 17, 199)} == {200}


def test_the_plane_recovers_its_coefficients_and_prices_unmeasured_shapes():
    coef = (1e-3, 2e-5, 1e-6, 3e-8)
    measured = [(b, w) for b in (1, 2, 4, 8) for w in (64, 128, 192)]
    cost = ShapeCost(plane_table(coef, measured), [1, 2, 4, 8, 16, 24, 32], WINDOW_ROUND, 512)
    np.testing.assert_allclose(cost.coef, coef, rtol=1e-6)
    expected = coef[0] + coef[1] * 32 + coef[2] * 256 + coef[3] * 32 * 256  # a bucket and window never measured
    assert cost(30, 250) == pytest.approx(expected)


def test_the_plane_keeps_the_measured_seconds_and_never_a_negative_slope():
    # noisy seconds whose free fit would give the window a negative slope
    table = {(1, 16): [10, 10 * 1.0e-3], (1, 32): [10, 10 * 0.9e-3], (4, 16): [6, 6 * 2.0e-3],
             (4, 32): [6, 6 * 1.9e-3], (8, 16): [3, 3 * 3.1e-3]}
    cost = ShapeCost(table, [1, 2, 4, 8], WINDOW_ROUND, 64)
    assert (cost.coef[1:] >= 0).all()
    assert sum(n * cost.plane(b, w) for (b, w), (n, _) in table.items()) == pytest.approx(
        sum(s for _, s in table.values()), rel=1e-9)  # the intercept's normal equation
    assert cost(8, 60) >= cost(8, 16) >= cost(1, 16)


def test_one_bucket_and_one_window_cost_their_mean():
    cost = ShapeCost({(4, 64): [5, 5e-3]}, [1, 2, 4], WINDOW_ROUND, 64)
    assert cost(3, 50) == pytest.approx(1e-3)


def test_replay_prices_each_step_by_its_own_bucket_and_window():
    """Two samples of one prompt (P = 10): 3 and 20 tokens, i.e. 2 and 19 decode steps. Steps 0-1 run 2
    sequences (bucket 2) reaching 11-12 positions (window 16); steps 2-5 one sequence (bucket 1) reaching
    13-16 (window 16); steps 6-18 reaching 17-29 (window 32)."""
    coef = (1.0, 0.5, 0.01, 0.0)
    cost = ShapeCost(plane_table(coef, [(1, 16), (2, 16), (1, 32), (2, 32), (4, 16), (1, 48)]),
                     [1, 2, 4], WINDOW_ROUND, 64)
    samples = [{"prompt": 0, "sample": 0, "prompt_len": 10, "response_len": 3},
               {"prompt": 0, "sample": 1, "prompt_len": 10, "response_len": 20}]
    _, total = replay(samples, 4, 2, StepCost({}, 0.0, 0, shapes=cost))
    step = lambda b, w: coef[0] + coef[1] * b + coef[2] * w  # noqa: E731
    assert total == pytest.approx(2 * step(2, 16) + 4 * step(1, 16) + 13 * step(1, 32))


def shape_histogram(samples, slots, g, shapes: ShapeCost) -> collections.Counter:
    """(bucket, window) -> decode steps the replay runs there."""
    seen = collections.Counter()

    class Counting(ShapeCost):
        def __call__(self, active, reach):
            seen[(self.pieces(active)[0], self.window(reach))] += 1
            return 0.0

    counting = Counting.__new__(Counting)
    counting.__dict__.update(shapes.__dict__)
    replay(samples, slots, g, StepCost({}, 0.0, 0, shapes=counting))
    return seen


@pytest.mark.e2e
def test_a_recorded_sync_cell_replays_to_its_recorded_steps(async_ladder_run):
    """The sync cell of the shared `--ablation async` run (lognormal lengths, 4 sequences at a time): per
    iteration and rank, the replay of the rank's samples runs exactly the decode steps (bucket, window) the
    sampler recorded, and the predicted rollout seconds of the cell are the seconds its steps and refills
    recorded, within 5%."""
    from rlbench.analysis import data
    from rlbench.core.costmodel.predict import measurements

    run_dir, _ = async_ladder_run
    sync = data.load(run_dir).cell("sync")
    stats = {r["iteration"]: r["workers"] for r in sync.result["rollout_stats"]}
    predicted = recorded = 0.0
    checked = 0
    for m in measurements(sync.result, sync.samples, sync.events):
        k = m.samples[0]["iteration"]
        assert m.cost.shapes is not None, "the sampler records its steps' shapes"
        for r, w in enumerate(stats[k]):
            shard = m.shard(r, len(stats[k]))
            want = collections.Counter({tuple(map(int, key.split(":"))): n
                                        for key, (n, _) in w["step_s_by_shape"].items()})
            assert shape_histogram(shard, m.slots, m.g, m.cost.shapes) == want, (k, r)
            predicted += replay(shard, m.slots, m.g, m.cost)[1]
            recorded += sum(s for _, s in w["step_s_by_shape"].values()) + w["refill_s"]
            checked += 1
    assert checked >= 2
    assert predicted == pytest.approx(recorded, rel=0.05)
