"""`rlbench plan LOG`: predictions of every asynchronous schedule and device split from a
synchronous run's own log (docs/architecture/cost-model.md, 'Planning from a log').

    detect.py                 which format a log is, by content, and its reader
    logs.py                   StepLog (what every reader returns) and the errors naming file, line
                              and key
    rlbench_results.py        rlbench's results.json / run folder (its sync cell)
    verl_metrics.py           VERL's metric keys -> LoggedStep (shared by the three VERL readers)
    verl_jsonl.py, verl_console.py, tensorboard_events.py     VERL's file logger, console,
                                                              TensorBoard
    trl_state.py              TRL's trainer_state.json log history
    assume.py, roofline.py    the stated assumptions, their ranges and sources (defaults, roofline,
                              `rlbench env`)
    command.py                what the CLI runs: log -> the cost model's batches ->
                              rlbench.analysis.plan

The batches are built in the core (rlbench.core.costmodel.fromlog), the predictions made in the
analysis layer (rlbench.analysis.plan), the output rendered in reports/ (plan_text.py,
plan_html.py).
"""
