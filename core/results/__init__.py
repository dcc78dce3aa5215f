"""The result files (docs/architecture/result-files.md) and what is derived from them: schema,
writer, metrics, the metric table, utilisation, provenance."""
