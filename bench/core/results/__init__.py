"""The result files (docs/architecture.md, 'Result files') and what is derived from them: schema, writer,
metrics, the metric table, utilisation, provenance."""
