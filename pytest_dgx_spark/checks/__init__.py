"""One module per gotcha: a ``gather(ctx)`` that asks the machine, an ``evaluate`` that decides (see kit)."""
