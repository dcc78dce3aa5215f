"""`rlbench compare`: two runs' key metrics side by side (rlbench.analysis.comparison), as markdown."""
from __future__ import annotations

import pandas as pd
from rlbench.analysis import comparison
from rlbench.reports.tables import to_markdown


def compare(run_a, run_b) -> tuple[pd.DataFrame, str]:
    """-> (the long table, its text: which runs, how cells were matched, the table in markdown)."""
    df, about = comparison.compare(run_a, run_b)
    return df, f"{about}\n\n{to_markdown(df)}"
