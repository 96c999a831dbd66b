"""G7 — SM121: can the installed stack run on GB10, and where it uses NVFP4, FP8 or

This package is the whole check: its spec (``spec.json``, data the catalog reads on every pytest run
without importing this package), its finding codes (:mod:`.findings`) and the check itself
(:mod:`.check`: its facts, ``gather``, ``evaluate``)."""
