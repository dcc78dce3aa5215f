"""The cost model: predicted speedups from a sync run's measured quantities (nothing fitted). Core
logic; reports and `rlbench simulate` only render or sweep what it predicts."""
