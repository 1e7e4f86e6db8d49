"""The queue families, one package each (docs/families.md): everything that differs between
the queues the toolkit judges, registered by name through the ``echomq_chaos.families`` entry
points (``chaos.registry``). No module outside a family's package names it."""
