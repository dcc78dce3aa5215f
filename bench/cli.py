"""rlbench command line. Nothing it imports imports torch or transformers (the processes that run
cells do), so `rlbench --help`, `config`, `report`, `compare` and `check` are instant
(tests/meta/test_imports.py). At its import it loads the glossary (the help's definitions) and no
more: each command loads what it runs when it runs, so that `rlbench --help` answers in under half a
second (docs/results/startup.md).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import click
import typer
from typer.core import TyperCommand
from rlbench.check import cli as check_cli
from rlbench.core.errors import UserError, WorkerError
from rlbench.reports.glossary import help_epilog

# rich_markup_mode=None: click's plain help; typer's rich rendering would import rich (0.2 s) for
# every --help
app = typer.Typer(add_completion=False, no_args_is_help=False, pretty_exceptions_enable=False,
                  rich_markup_mode=None,
                  help="Benchmark synchronous vs periodic-asynchronous RL post-training (TPSPD, "
                       "accuracy).")


class RunCommand(TyperCommand):
    """`rlbench run`, whose --ablation help is made from the ablation table
    (bench/run/ablation_table.py) when `rlbench run --help` shows it: the table loads the schedule
    and experiment registries (their pydantic option models, 0.2 s), which `rlbench --help` does not
    need."""

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # inside: the registries, loaded only for the help that lists the ablations
        from rlbench.run.ablation_table import help_text

        for param in self.params:
            if param.name == "ablation":
                param.help = help_text()
        super().format_help(ctx, formatter)


@app.callback(invoke_without_command=True)
def _root(ctx: typer.Context) -> None:
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())


def definitions_help() -> str:
    """What the table's columns and the verdict's words mean (reports/glossary.py), ending `run` and
    `report`'s --help."""
    return help_epilog()


@app.command(cls=RunCommand, epilog=definitions_help())
def run(
    config: Optional[Path] = typer.Option(None, "--config", "-c",
                                          help="YAML overrides: a file, or the name of a shipped "
                                               "config (`rlbench config --list`; default: "
                                               "cpu-default)."),
    ablation: Optional[str] = typer.Option(None, "--ablation", "-a",
                                           help="Cells to run (the ablations, listed here by "
                                                "`rlbench run --help`)."),
    set_: list[str] = typer.Option([], "--set", "-s",
                                   help="Override a config key, e.g. --set train.lr=1e-4."),
    engine: str = typer.Option("rlbench", "--engine", "-e",
                               help="rlbench (this harness's engines), or a real peer framework: "
                                    "trl (TRL's GRPOTrainer on the same CPU cores; pip install "
                                    "'rlbench[trl]'), verl or mindspeed-rl (where installed with "
                                    "their hardware)."),
    out: Path = typer.Option(Path("runs"), "--out", "-o",
                             help="Folder that receives the run folder."),
    report: bool = typer.Option(True, "--report/--no-report",
                                help="Write tables, plots and report.html at the end."),
    wide: bool = typer.Option(False, "--wide",
                              help="Print every column and section at the end (the verdict and "
                              "the key columns otherwise, within 100 characters a line)."),
    progress: bool = typer.Option(True, "--progress/--no-progress",
                                  help="Show progress: a line per cell on a terminal, a plain line "
                                       "per step elsewhere."),
    profile: bool = typer.Option(False, "--profile", help="Record torch.profiler traces per worker "
                                 "(run.profile_iterations after warm-up) into <cell>/traces for "
                                 "TensorBoard/Perfetto."),
    seeds: Optional[str] = typer.Option(None, "--seeds",
                                        help="Run every cell once per seed, e.g. 0,1,2 (sets "
                                        "run.seed); the report aggregates each cell over its "
                                        "seeds."),
    logger: list[str] = typer.Option([], "--logger",
                                     help="Per-iteration curves under VERL's metric names: "
                                     "tensorboard (<run folder>/tensorboard/<cell>; `tensorboard "
                                     "--logdir <run folder>/tensorboard`), wandb (offline, <run "
                                     "folder>/wandb/<cell>), or both (repeat the option or "
                                     "tensorboard,wandb); sets run.logger."),
    resume: Optional[Path] = typer.Option(None, "--resume",
                                          help="Finish the run in RUN_DIR: its completed cells "
                                          "are kept (after checking they match its config and this "
                                          "code), the others run again from their start; the "
                                          "config, ablation and seeds are the run's own."),
) -> None:
    """Run the benchmark: each cell in its own process, then print the table and write the
    report."""
    # inside: the run machinery (processes, fork servers, the config models), which --help need not
    # load
    from rlbench.core.devices import procs
    from rlbench.run.ablation import run_ablation
    from rlbench.run.around import Ending, run_external, sweep
    from rlbench.run.resume import resume_run

    procs.mark_run()  # every process of this run carries the token: found and ended at the end
    sets = set_ + (["run.profile=true"] if profile else []) + _logger_set(logger)
    end = Ending(report, wide)
    try:
        if resume is not None:
            resume_run(resume, progress, end,
                       refused={"--config": config, "--set": set_, "--ablation": ablation,
                                                          "--seeds": seeds,
                                "--engine": engine != "rlbench",
                                                          "--profile": profile, "--logger": logger})
        elif engine != "rlbench":
            run_external(engine, config, sets, seeds, out, end, progress)
        else:
            run_ablation(ablation or "async", config, sets, out, end, progress, seeds)
    finally:
        sweep()


def _logger_set(values: list[str]) -> list[str]:
    """--logger's values (repeated, or comma lists) -> the --set that carries them to every cell."""
    if not values:
        return []
    # inside: the config models, which --help need not load
    from rlbench.core.config import LOGGERS, parse_loggers

    try:
        names = parse_loggers(",".join(values))
    except ValueError:
        raise UserError(f"--logger {','.join(values)}: allowed: {', '.join(LOGGERS)}, or both "
                        "(repeat --logger or give tensorboard,wandb)") from None
    return [f"run.logger={','.join(names)}"]


@app.command("report", epilog=definitions_help())
def report_cmd(run_dir: Path = typer.Argument(..., help="A run or ablation folder."),
               add: list[Path] = typer.Option([], "--add",
                                              help="Another run folder whose cells join this "
                                              "report (e.g. `--ablation regime-natural` beside a "
                                              "regime map); repeatable."),
               markdown: bool = typer.Option(False, "--markdown",
                                             help="Print the run's tables as markdown, under "
                                             "the command, config, machine and date that made them "
                                             "(for docs/results/); writes nothing."),
               wide: bool = typer.Option(False, "--wide",
                                         help="Print every column and section (the verdict "
                                         "and the key columns otherwise, within 100 characters a "
                                         "line).")) -> None:
    """Write summary.csv/.md, plots and report.html into RUN_DIR and print its verdict and key
    columns (with --markdown: print its tables)."""
    # inside: pandas and matplotlib (1.7 s) and the experiments' records (pydantic), which `rlbench
    # --help` and `rlbench config` need not load
    from rlbench.experiments import write_results
    from rlbench.reporting import build_report, markdown_report, summary_table_text

    if markdown:
        typer.echo(markdown_report(run_dir, add), nl=False)
        return

    # each experiment's CSV (families.csv: a families ladder only), shown below
    write_results(run_dir)
    typer.echo(summary_table_text(run_dir, add, wide=wide))
    typer.echo(f"report: {build_report(run_dir, add)}")


@app.command()
def compare(run_a: Path = typer.Argument(...), run_b: Path = typer.Argument(...),
            more: Optional[list[Path]] = typer.Argument(None,
                                                        help="More runs of the same config: the "
                                                             "verdicts "
                                                        "across every run given")) -> None:
    """Side-by-side table of two runs (or ablations) with B/A ratios; with runs of one config,
    whether their verdicts agree within their intervals (reruns)."""
    # inside: pandas, which `rlbench --help` need not load
    from rlbench.reports import compare as do_compare

    _, text = do_compare(run_a, run_b, *(more or []))
    typer.echo(text)


app.command("check")(check_cli.check_cmd)  # the regression gate's two commands (bench/check/cli.py)
app.command("history")(check_cli.history_cmd)


LINK_HELP = ("The link between nodes, Gbit/s (as `rlbench env --ray-address` measures it): weight "
             "sync, group transfer and the gradient all-reduce across nodes priced in every row "
             "(docs/architecture/cost-model.md).")
LATENCY_HELP = "The link's one-way latency in ms, with --link-gbps (default 0.05)."


@app.command("simulate")
def simulate(
    run_dir: Optional[Path] = typer.Argument(None,
                                             help="A run or ablation folder with a sync cell to "
                                                  "calibrate "
                                                         "from (and to validate against)."),
    preset: Optional[str] = typer.Option(None, "--preset", "-p",
                                         help="Simulate a preset setting instead: paper-7b (7B, "
                                              "GSM8K-like lengths, the paper's figures beside)."),
    devices: Optional[str] = typer.Option(None, "--devices", "-d",
                                          help="Device counts to sweep, comma-separated (default "
                                               "8,16,32,64)."),
    rollout_share: Optional[str] = typer.Option(None, "--rollout-share", "-r",
                                                help="Rollout pool shares to sweep, each in (0, 1) "
                                                     "(default 0.25,0.5,0.75)."),
    staleness: int = typer.Option(1, "--staleness", "-k", min=0, help="k of bounded_async."),
    out: Optional[Path] = typer.Option(None, "--out", "-o",
                                       help="Output folder (default RUN_DIR/simulate or "
                                            "runs/simulate-PRESET)."),
    link_gbps: Optional[float] = typer.Option(None, "--link-gbps", help=LINK_HELP),
    link_latency_ms: Optional[float] = typer.Option(None, "--link-latency-ms", help=LATENCY_HELP),
    devices_per_node: Optional[int] = typer.Option(None, "--devices-per-node",
                                                   help="Devices on one node, "
                                                   "with a link (default 1: every device a node of "
                                                   "its own)."),
    link_overhead_ms: Optional[float] = typer.Option(None, "--link-overhead-ms",
                                                     help="A Ray object "
                                                     "transfer's fixed part in ms, with "
                                                     "--link-gbps (as `rlbench env --ray-address` "
                                                     "measures it; default: one round trip)."),
) -> None:
    """Predict sync / periodic-async / bounded-async TPSPD and speedups on N rollout + M training
    devices, every device at the per-device costs measured in a run's data-parallel sync cell (the
    report's measured-vs-predicted model) or stated by a preset; writes simulate.json and plots."""
    # inside: the simulator loads the config models (its calibration reads a run's config), which
    # --help need not load
    from rlbench.core.costmodel.link import stated
    from rlbench.simulate import format_text, parse_list, run_simulation

    result = run_simulation(run_dir, preset, parse_list(devices, int, "--devices"),
                            parse_list(rollout_share, float, "--rollout-share"), out, staleness,
                            stated_link=stated(link_gbps, link_latency_ms,
                                               overhead_ms=link_overhead_ms),
                            devices_per_node=devices_per_node)
    typer.echo(format_text(result))


@app.command("plan")
def plan_cmd(
    log: Path = typer.Argument(...,
                               help="A synchronous run's log: rlbench results.json (or its run "
                                    "folder), "
                                         "VERL console output or file-logger JSONL, TensorBoard "
                                         "event files, TRL trainer_state.json (found by content)."),
    gpus: Optional[int] = typer.Option(None, "--gpus", "-g",
                                       help="Devices to plan for (default: the log's)."),
    model: Optional[Path] = typer.Option(None, "--model", "-m",
                                         help="The model's Hugging Face config.json (or "
                                         "its folder): weight and KV bytes for the roofline "
                                         "assumptions."),
    device: Optional[str] = typer.Option(None, "--device", "-d",
                                         help="The GPU (A100, H100, H200, H20, B200, "
                                         "L40S, 910B): datasheet bandwidths for the roofline "
                                         "assumptions."),
    as_json: bool = typer.Option(False, "--json",
                                 help="Print the plan as JSON (every split, interval, "
                                                      "assumption) instead of the tables."),
    html: Optional[Path] = typer.Option(None, "--html",
                                        help="Also write the plan as an HTML page here."),
    assume_items: Optional[list[str]] = typer.Option(None, "--assume",
                                                     help="NAME=VALUE: your own value of an "
                                                     "assumption (repeatable): group-size, "
                                                     "decode-slope, weight-crossing (s), "
                                                     "train-speed, rollout-share."),
    link_gbps: Optional[float] = typer.Option(None, "--link-gbps", help=LINK_HELP),
    link_latency_ms: Optional[float] = typer.Option(None, "--link-latency-ms", help=LATENCY_HELP),
    devices_per_node: Optional[int] = typer.Option(None, "--devices-per-node",
                                                   help="Devices on one node, with "
                                                   "--link-gbps (default 8)."),
    link_overhead_ms: Optional[float] = typer.Option(None, "--link-overhead-ms",
                                                     help="A Ray object "
                                                     "transfer's fixed part in ms, with "
                                                     "--link-gbps (default: one round trip)."),
) -> None:
    """Predict what each asynchronous schedule and device split would give, from a synchronous run's
    own log: periodic asynchrony (and its barrier split), one-step-off, bounded staleness, partial
    rollout; the best split of the devices for each, with an interval and every assumption's
    source."""
    # inside: the cost model loads the config models, which --help need not load
    from rlbench.core.costmodel.link import stated
    from rlbench.plan.command import run_plan
    from rlbench.reports.plan_text import format_text

    result = run_plan(log, gpus, model, device, assume_items,
                      stated(link_gbps, link_latency_ms, overhead_ms=link_overhead_ms),
                      devices_per_node)
    if html is not None:
        # inside: matplotlib and pandas, for --html only
        from rlbench.reports.plan_html import write_plan_html

        result["html"] = str(write_plan_html(result, html))
    typer.echo(json.dumps(result, indent=1) if as_json else format_text(result))
    if html is not None and not as_json:
        typer.echo(f"\nwrote {result['html']}")


@app.command()
def env(remeasure: bool = typer.Option(False, "--remeasure",
                                       help="Measure the peak again (else cached)."),
        dtype: str = typer.Option("float32", "--dtype",
                                  help="dtype of the matmul probe: float32, bfloat16, "
                                  "float16."),
        ray_address: Optional[str] = typer.Option(None, "--ray-address",
                                                  help="A running Ray cluster (an address, "
                                                  "or auto): also measure the link between every "
                                                  "two of its nodes (round trip, and Ray object "
                                                  "transfers at two sizes)."),
        transfer_mb: Optional[list[float]] = typer.Option(None, "--transfer-mb",
                                                          help="With --ray-address: "
                                                          "also send one object of this many MB "
                                                          "(e.g. a model's weights) over the "
                                                          "slowest link, beside the link's "
                                                          "prediction of its seconds (repeatable).")
        ) -> None:
    """What hardware and software rlbench sees, and one device's measured peak (matmul FLOP/s, copy
    bytes/s) that per-stage MFU and bandwidth utilisation are measured against; with --ray-address,
    the bandwidth and latency between a cluster's nodes."""
    # inside: the environment probes, which --help need not load
    from rlbench.core.results import provenance

    out = provenance.environment(dtype, remeasure)
    if ray_address:
        from rlbench.engines.ray_link import measure_cluster  # inside: Ray, for this option only

        out["cluster"] = measure_cluster(ray_address, [int(mb * 1e6) for mb in transfer_mb or ()])
    typer.echo(json.dumps(out, indent=1))


@app.command("config")
def config_cmd(
    config: Optional[Path] = typer.Option(None, "--config", "-c"),
    set_: list[str] = typer.Option([], "--set", "-s"),
    docs: bool = typer.Option(False, "--docs",
                              help="List every key with its default and description."),
    list_: bool = typer.Option(False, "--list",
                               help="List the shipped configs (`--config NAME` runs one)."),
) -> None:
    """Print the resolved configuration (or, with --docs, every key documented; with --list, the
    shipped configs)."""
    # inside: the config models and YAML, which --help need not load
    import yaml
    from rlbench.core.config import documented_keys
    from rlbench.core.config_files import load_config, shipped_configs

    if list_:
        for name, what in shipped_configs().items():
            typer.echo(f"{name:<28} {what}")
        return
    if docs:
        for line in documented_keys():
            typer.echo(line)
        return
    typer.echo(yaml.safe_dump(load_config(config, set_).model_dump(mode="json"), sort_keys=False))


def main() -> None:
    try:
        # Ctrl-C comes back from click as the return code 130, not raised
        code = app(standalone_mode=False)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    except WorkerError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        print("interrupted: measured iterations are kept in the run folder", file=sys.stderr)
        sys.exit(130)
    except Exception as e:  # click usage errors and the like
        usage = (click.exceptions.ClickException,)
        try:
            # inside: only typer >= 0.24 has it (its own vendored copy of click's exceptions, raised
            # instead)
            from typer._click.exceptions import ClickException as TyperClickException
            usage += (TyperClickException,)
        except ImportError:
            pass
        if isinstance(e, usage):
            e.show()
            sys.exit(2)
        raise
    if code == 130:
        print("interrupted: measured iterations are kept in the run folder", file=sys.stderr)
    if isinstance(code, int) and code:
        sys.exit(code)


if __name__ == "__main__":
    main()
