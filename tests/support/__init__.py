"""What the tests share that is not a fixture: builders of realistic result folders (report_runs,
accuracy_runs, regime_runs, check_runs) and the one way to run the CLI in a subprocess (cli)."""
