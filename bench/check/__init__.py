"""`rlbench check`: regression verdicts, against a stored baseline or an A/B run of two trees on
this machine, and their measured power. Reads result files only."""
