"""The toxics of the built-in Toxiproxy server, laid out as Toxiproxy's ``toxics/`` package is:
:mod:`.toxic` (what a toxic is and how it runs on a link), one module per kind, and
:mod:`.registry` (every kind by its API name)."""
