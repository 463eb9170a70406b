# Shortcuts for the README's two commands (scripts/demo.sh and scripts/test.sh) and friends.
.PHONY: setup demo test lint bench

setup:
	./scripts/setup.sh

demo:
	./scripts/demo.sh

test:
	./scripts/test.sh -q

lint:
	.venv/bin/ruff check src tests bench
	.venv/bin/mypy

bench: setup  # PUBLIC_PROBE=path/to/agentsec-pack/agentsec/probe/blast_probe.py
	.venv/bin/python bench/probe_time.py --public-probe "$(PUBLIC_PROBE)"
