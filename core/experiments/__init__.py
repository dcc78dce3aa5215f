"""What an experiment record says and the pieces it loads (spec.py): the types the analysis and the
reports call. The records and their registry are the experiments' own
(bench/experiments/__init__.py)."""
