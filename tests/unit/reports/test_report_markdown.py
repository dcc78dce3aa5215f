"""`rlbench report RUN --markdown` (reports/markdown.py): the run's tables as markdown under the command,
config file, machine and date that made them; the numbers are the result files' own. And the record
of those facts in ablation.json (bench/run/ablation.py new_record)."""
import json
import re

import pytest

from conftest import TINY
from support.cli import rlbench
from support.report_runs import make_ablation, make_families
from rlbench.core.config_files import load_config
from rlbench.core.results import schema
from rlbench.reporting import markdown_report
from rlbench.reports.tables import fmt
from rlbench.run.ablation import cells_for, command_line, new_record

RECORDED = {"command": "rlbench run --config configs/cpu-tiny.yaml --ablation async",
            "config_file": "configs/cpu-tiny.yaml", "created": "2026-11-25T16:11:00+00:00",
            "machine": {"cpu_model": "Planted CPU 9000", "cores": 2, "logical_cpus": 4, "platform": "Linux"}}


def rows_of(md: str, section: str) -> dict[str, list[str]]:
    """The markdown table under `### section`: first column -> its cells."""
    block = md.split(f"### {section}", 1)[1].split("\n### ", 1)[0]
    lines = [line for line in block.splitlines() if line.startswith("| ")]
    return {cells[0]: cells for cells in ([c.strip() for c in line.strip("|").split(" | ")] for line in lines[1:])}


def aggregates(root, cell: str) -> dict:
    return json.loads((root / cell / schema.RESULTS).read_text())["aggregates"]


def test_header_and_tables_equal_the_files(tmp_path):
    root = make_ablation(tmp_path / "run")
    record = json.loads((root / schema.ABLATION).read_text())
    schema.atomic_write_json(root / schema.ABLATION, {**record, **RECORDED})
    md = markdown_report(root)
    assert "- Command: `rlbench run --config configs/cpu-tiny.yaml --ablation async`" in md
    assert "- Config file: `configs/cpu-tiny.yaml`" in md
    assert "- Machine: Planted CPU 9000, 2 of 4 cores usable, recorded by the run" in md
    assert "- Date: 2026-11-25T16:11:00+00:00 (run start)" in md
    summary = rows_of(md, "Summary")
    assert list(summary) == ["sync", "periodic_async"]
    ref = aggregates(root, "sync")["tpspd"]["median"]
    for cell in ("sync", "periodic_async"):
        tp = aggregates(root, cell)["tpspd"]
        assert summary[cell][1] == f"{fmt(tp['median'])} ({fmt(tp['min'])}–{fmt(tp['max'])})"
        assert summary[cell][2] == f"{tp['median'] / ref:.2f}×"
    speedups = rows_of(md, "Speedup")
    measured = aggregates(root, "periodic_async")["tpspd"]["median"] / ref
    assert speedups["periodic_async"][3] == f"{measured:.2f}×" and speedups["periodic_async"][1] == "sync"
    accuracy = rows_of(md, "Accuracy")
    evals = json.loads((root / "sync" / schema.RESULTS).read_text())["evals"]
    assert accuracy["sync"][3].startswith(f"{fmt(evals[0]['accuracy'])}→{fmt(evals[-1]['accuracy'])}")
    assert "### Families ladder" not in md


def test_an_unrecorded_run_says_so(tmp_path):
    """A run made before ablation.json recorded its origin: nothing is invented, the machine is marked as read
    now."""
    md = markdown_report(make_ablation(tmp_path / "old"))
    assert "- Command: not recorded" in md and "- Config file: not recorded" in md
    assert "not recorded by the run: this machine, read from /proc/cpuinfo at report time" in md
    assert "- Date: 2025-01-01T00:00:00+00:00 (the first cell's provenance)" in md


def test_families_ladder_section(tmp_path):
    from rlbench.analysis.data import load
    from rlbench.experiments.families.analysis import families_frame

    root = make_families(tmp_path / "families")
    md = markdown_report(root)
    assert "- measured: split" in md and "- predicted: split" in md
    ladder = rows_of(md, "Families ladder")
    frame = families_frame(load(root)).set_index("cell")
    assert list(ladder) == list(frame.index)
    for cell in frame.index:
        r = frame.loc[cell]
        assert ladder[cell][1] == f"{fmt(r['tpspd_median'])} ({fmt(r['tpspd_min'])}–{fmt(r['tpspd_max'])})"
    assert ladder["barrier"][2] == f"split {frame.loc['barrier', 'factor']:.2f}×"
    assert not (root / "families.csv").exists()  # --markdown writes nothing


def test_the_cli_prints_markdown_and_writes_nothing(tmp_path):
    root = make_ablation(tmp_path / "run")
    before = sorted(p.name for p in root.iterdir())
    proc = rlbench("report", root, "--markdown", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("## run (`--ablation async`)\n") and "| cell | TPSPD median (min–max)" in proc.stdout
    assert sorted(p.name for p in root.iterdir()) == before  # no report.html, no summary.csv


def test_the_record_holds_the_command_config_machine_and_date():
    base = load_config(TINY)
    record = new_record("async", base, [(c, cfg, None) for c, cfg in cells_for("async", base)], None, {},
                        config=TINY)
    assert record["config_file"] == str(TINY)
    assert set(record["machine"]) == {"cpu_model", "cores", "logical_cpus", "platform"}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", record["created"])
    assert isinstance(record["command"], str) and record["command"]


@pytest.mark.parametrize("argv, env, expected", [
    (["/x/.venv/bin/rlbench", "run", "--ablation", "none"], {}, "rlbench run --ablation none"),
    (["/x/bench/cli.py", "run", "--set", "run.name=a b"], {}, "rlbench run --set 'run.name=a b'"),
    (["rlbench", "check"], {"RLBENCH_SLOW": "decode:0.10", "HOME": "/root"}, "RLBENCH_SLOW=decode:0.10 rlbench check"),
    (["/usr/bin/pytest", "-q"], {}, "/usr/bin/pytest -q"),
])
def test_command_line(argv, env, expected):
    assert command_line(argv, env) == expected
