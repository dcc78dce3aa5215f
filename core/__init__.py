"""The core: what every other layer shares and nothing else. Config models, errors, the component
and schedule registries, the one timer (record/), the result schema, metrics and writer (results/),
devices and placement (devices/), the cost model (costmodel/) and the hook points test hooks
register into (hooks.py). It imports no harness, engine or report code
(tests/meta/test_structure.py); the registries name engine builders by string, imported only when a
component is built."""
