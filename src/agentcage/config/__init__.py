"""cage.yaml: the typed model (model.py), loading with one-line errors (load.py), scaffolds.

Nothing is imported here, so that light commands (exec, logs) do not pay for building the
pydantic schema.
"""
