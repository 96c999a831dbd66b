"""G2 — flash-attn, and Unsloth's override of ``attn_implementation``.

This package is the whole check: its spec (``spec.json``, data the catalog reads on every pytest run
without importing this package), its finding codes (:mod:`.findings`) and the check itself
(:mod:`.check`: its facts, ``gather``, ``evaluate``)."""
