"""XLA's and TF's standalone tools over our pipeline: ``run_hlo`` (XLA's run_hlo_module) and ``aot``
(tfcompile). They sit at the top of the layering, next to cli.py: they drive hlo/, passes/, codegen/,
and (aot) graph/ and tf2hlo/; nothing below imports them."""
