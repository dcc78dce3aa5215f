"""The link between nodes for `rlbench simulate` and `rlbench plan` (core/costmodel/link.py): stated
by the user (--link-gbps), or as a run on several nodes measured it (its rollout workers' weight
transfers from another node's object store, its groups' transfers to the driver), and the bytes that
cross it (the model's weights, from results.json; a group's tokens)."""
from __future__ import annotations

import statistics
from pathlib import Path

from rlbench.core.costmodel.link import GROUP_BYTES_PER_TOKEN, Link, NodeLayout
from rlbench.core.errors import UserError
from rlbench.core.record.stages import Stage
from rlbench.core.results import schema


def weight_bytes(cell: dict) -> float | None:
    """The model's parameters in bytes (results.json model.parameters x shape.param_bytes); None:
    unknown."""
    model = cell.get("model") or {}
    params, width = model.get("parameters"), (model.get("shape") or {}).get("param_bytes")
    return float(params * width) if params and width else None


def group_bytes(batches: list) -> float:
    """One group's bytes on the way: its tokens (prompt once per sample, as it travels) x
    GROUP_BYTES_PER_TOKEN."""
    rows = [s for b in batches for s in b.samples]
    groups = len({(i, s["prompt"]) for i, b in enumerate(batches) for s in b.samples}) or 1
    return GROUP_BYTES_PER_TOKEN * sum(int(s["prompt_len"]) + int(s["response_len"]) for s
                                       in rows) / groups


def _crossed(cell: dict) -> set[str]:
    """The workers of a cell on another node than its trainer rank 0 (results.json
    placement[*].observed)."""
    nodes = {p["worker"]: (p.get("observed") or {}).get("node") for p in cell.get("placement")
                          or []}
    home = nodes.get("trainer0")
    return {w for w, n in nodes.items() if n and home and n != home}


def link_from_run(run_dir: Path) -> Link | None:
    """The link as a run on several nodes measured it: a weight transfer's seconds over the weights'
    bytes, less a transfer's fixed part, which a group's transfer (a few kB) is made of; None: no
    transfer of the run crossed nodes."""
    weights, groups, size, cells = [], [], None, []
    for cell in schema.load_run(Path(run_dir)):
        far = _crossed(cell)
        if not far:
            continue
        events = schema.load_events(Path(cell["_dir"]))
        weights += [e["end"] - e["start"] for e in events
                    if e["stage"] == Stage.WEIGHT_TRANSFER.value and e["worker"] in far]
        groups += [e["end"] - e["start"] for e in events if e["stage"]
                   == Stage.GROUP_TRANSFER.value]
        size = size or weight_bytes(cell)
        cells.append(cell["cell"])
    if not weights or not size:
        return None
    overhead = statistics.median(groups) if groups else 0.0
    took = statistics.median(weights)
    rate = size / max(took - overhead, 1e-9)
    return Link(rate, overhead / 2, overhead,
                f"measured in {run_dir} (cells {', '.join(cells)}): {len(weights)} "
                f"weight transfers of {size / 1e6:.1f} MB across nodes (median {took:.3f} s), "
                f"{len(groups)} group transfers (median {overhead * 1e3:.1f} ms: a transfer's "
                f"fixed part)")


def weight_sync_check(run_dir: Path, link: Link, weights: float | None) -> dict | None:
    """The weight transfers a run on several nodes measured against the link's price of the same
    bytes (link.transfer_s): a check of the cost model's weight-sync term. None: no transfer crossed
    nodes."""
    measured = []
    for cell in schema.load_run(Path(run_dir)):
        far = _crossed(cell)
        events = schema.load_events(Path(cell["_dir"])) if far else []
        measured += [e["end"] - e["start"] for e in events
                     if e["stage"] == Stage.WEIGHT_TRANSFER.value and e["worker"] in far]
    if not measured or not weights:
        return None
    predicted, median = link.transfer_s(weights), statistics.median(measured)
    return {"weight_bytes": weights, "predicted_s": predicted, "measured_median_s": median,
            "measured_min_s": min(measured), "transfers": len(measured),
            "error": predicted / median - 1, "link_source": link.source}


def layout(link: Link | None, devices_per_node: int | None, weights: float | None,
           batches: list) -> NodeLayout | None:
    """The node layout the simulation prices (None: no link given or found, one node)."""
    if link is None:
        if devices_per_node is not None:
            raise UserError("--devices-per-node needs a link: --link-gbps, or a run measured on "
                            "several nodes")
        return None
    if weights is None:
        raise UserError("the link's terms need the model's bytes, which the run's results.json "
                        "does not record")
    per = devices_per_node or 1
    if per < 1:
        raise UserError(f"--devices-per-node {per}: must be >= 1")
    return NodeLayout(link, per, weights, group_bytes(batches))
