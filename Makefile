# The two commands of the README: `make demo` (set up, then train on the digits data) and `make test`.
.PHONY: setup demo test lint

setup:
	bash scripts/setup.sh

demo: setup
	.venv/bin/python examples/train_digits.py

lint:
	.venv/bin/ruff check sparkrunner tests bench examples
	.venv/bin/ruff format --check sparkrunner tests bench examples
	.venv/bin/mypy

test: setup lint
	bash scripts/run_tests.sh
