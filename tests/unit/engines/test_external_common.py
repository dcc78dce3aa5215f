"""What every peer adapter shares (engines/external/common.py): rlbench's TPSPD against the framework's own
figure, agreeing within TPSPD_TOLERANCE, compared at the framework's own device count where it has one."""
import pytest

from rlbench.engines.external.common import TPSPD_TOLERANCE, flag_tpspd, tpspd_check


def test_tpspd_check():
    assert tpspd_check(100.0, None) == {"reported": None, "rel_diff": None, "agree": None}
    assert tpspd_check(100.0, 100.0)["agree"] is True
    near = tpspd_check(100.0 * (1 + TPSPD_TOLERANCE / 2), 100.0)
    assert near["agree"] is True and near["rel_diff"] == pytest.approx(TPSPD_TOLERANCE / 2)
    assert tpspd_check(100.0 * (1 + 2 * TPSPD_TOLERANCE), 100.0)["agree"] is False
    assert tpspd_check(0.0, 0.0)["agree"] is True and tpspd_check(1.0, 0.0)["agree"] is False


def test_flag_tpspd_compares_at_the_frameworks_divisor_and_warns_per_disagreement():
    its = [{"iteration": 0, "tpspd": 50.0, "devices": 4, "external": {"perf/throughput": 100.0}},
           {"iteration": 1, "tpspd": 50.0, "devices": 4, "external": {"perf/throughput": 150.0}}]
    warnings = flag_tpspd(its, "perf/throughput", framework_devices=2)  # the framework divides by 2 of 4
    assert its[0]["external"]["tpspd_check"]["agree"] is True
    assert its[1]["external"]["tpspd_check"]["framework_devices"] == 2
    assert len(warnings) == 1 and warnings[0].startswith("iteration 1:") and "(2)" in warnings[0]
    its = [{"iteration": 0, "tpspd": 50.0, "devices": 4, "external": {"perf/throughput": 100.0}}]
    assert len(flag_tpspd(its, "perf/throughput")) == 1  # divided by every device: half the framework's
