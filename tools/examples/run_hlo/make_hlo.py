"""Writes the sample modules for ``tfxla-cluster run-hlo``: a dense + tanh + softmax layer as real XLA
(jaxlib) prints it, unoptimized (``mlp.hlo``) and after XLA:CPU's pipeline (``mlp.optimized.hlo``: fusions,
layouts, metadata, backend_config, stack frame tables), and ``mlp.inputs.npz`` (arg0..arg2)."""
import jax
import jax.numpy as jnp
import numpy as np


def layer(x, w, b):
    h = jnp.tanh(x @ w + b)
    return jax.nn.softmax(h, axis=-1), h.sum(axis=0)


rng = np.random.default_rng(0)
args = (rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((8, 16)).astype(np.float32),
        rng.standard_normal(16).astype(np.float32))
lowered = jax.jit(layer).lower(*args)
with open("mlp.hlo", "w") as f:
    f.write(lowered.as_text(dialect="hlo"))
with open("mlp.optimized.hlo", "w") as f:
    f.write(lowered.compile().as_text())
np.savez("mlp.inputs.npz", **{f"arg{k}": a for k, a in enumerate(args)})
