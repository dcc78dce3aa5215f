"""The result files (DESIGN.md §4) and what is derived from them: schema, writer, metrics, the metric
table, utilisation, provenance."""
