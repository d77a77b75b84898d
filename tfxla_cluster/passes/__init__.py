"""HLO optimization passes (XLA's HLO pipeline for CPU)."""
