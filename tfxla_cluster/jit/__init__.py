"""TF's compiler/jit: compilability, cycle detection, clustering, encapsulation."""
