"""insitubatch 0.2.0's ``insitubatch.frameworks`` module: the framework adapters under their old
path, so ``from insitubatch_rs.frameworks import pin_host_buffers`` works after the import change."""

from ._frameworks import as_tf_dataset, as_torch, pin_host_buffers, to_jax, to_jax_global, to_tf, to_torch

__all__ = ["as_tf_dataset", "as_torch", "pin_host_buffers", "to_jax", "to_jax_global", "to_tf", "to_torch"]
