"""What one generate call measured for the speedup prediction (engines/rollout/step_costs.py): decode steps
counted by sequences in flight and by the shape they ran at, refills and mid-generation reloads summed."""
import time

from rlbench.engines.rollout.step_costs import StepCosts


def test_steps_are_counted_by_sequences_in_flight_and_by_shape():
    costs = StepCosts(buckets=[1, 2, 4], window_round=16)
    t = time.perf_counter() - 0.01
    t = costs.step(t, 3, shape=(4, 32), cache_len=64)
    t = costs.step(t, 3, shape=(4, None), cache_len=64)  # None: the whole cache, cache_len positions
    costs.step(t, 1)  # no shape: counted by sequences in flight only
    stats = costs.stats()
    assert {b: v[0] for b, v in stats["step_s_by_active"].items()} == {"1": 1, "3": 2}
    assert {s: v[0] for s, v in stats["step_s_by_shape"].items()} == {"4:32": 1, "4:64": 1}
    assert stats["step_s_by_active"]["3"][1] >= 0.01  # the first step's seconds ran from t
    assert (stats["buckets"], stats["window_round"], stats["cache_len"]) == ([1, 2, 4], 16, 64)


def test_refills_and_reloads_add_up_and_no_shape_means_no_shape_keys():
    costs = StepCosts()
    t = costs.refill(time.perf_counter(), prompts=2)
    costs.refill(t, prompts=3)
    costs.reload(time.perf_counter(), recomputed=40)
    stats = costs.stats()
    assert (stats["refills"], stats["reloads"], stats["recomputed_tokens"]) == (2, 1, 40)
    assert costs.prompts == 5 and stats["refill_s"] >= 0 and stats["reload_s"] >= 0
    assert "step_s_by_shape" not in stats and stats["step_s_by_active"] == {}
