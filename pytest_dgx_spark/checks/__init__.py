"""One module per gotcha. Each exposes ``run(ctx) -> Result``, built from a
``gather(ctx)`` that asks the machine and an ``evaluate(...)`` that decides —
a pure function tested on recorded input."""
