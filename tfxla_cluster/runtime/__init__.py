"""Runtime: encapsulated launch nodes, per-signature compile caches, and the ``function`` wrapper."""
