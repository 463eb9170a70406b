# The README's two commands: `make demo` (set up, then measure an open configuration and a
# bubblewrap sandbox in the fake internet) and `make test` (set up, then run the whole suite).
.PHONY: setup demo test lint bench

setup:
	./scripts/setup.sh

demo: setup
	.venv/bin/agentsec demo

test: setup
	.venv/bin/ruff check src tests bench
	.venv/bin/python -m pytest -q

lint:
	.venv/bin/ruff check src tests bench

bench: setup
	.venv/bin/python bench/probe_time.py
