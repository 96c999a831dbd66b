"""G6 — unified-memory contention: who else holds (or will grab) the pool?

This package is the whole check: its spec (``spec.json``, data the catalog reads on every pytest run
without importing this package), its finding codes (:mod:`.findings`) and the check itself
(:mod:`.check`: its facts, ``gather``, ``evaluate``)."""
