"""G1 — CUDA 12/13 ABI: find the module linked to the wrong CUDA major before it segfaults.

This package is the whole check: its spec (``spec.json``, data the catalog reads on every pytest run
without importing this package), its finding codes (:mod:`.findings`) and the check itself
(:mod:`.check`: its facts, ``gather``, ``evaluate``)."""
