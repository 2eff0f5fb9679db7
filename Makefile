# The two commands of the README: `make demo` (set up the main environment, then fit and score a Spark ML pipeline on
# the digits data) and `make test` (set up the test toolchain too, then lint and test).
# `make image` builds the cluster image localhost/sparkrunner:latest with buildah (docker/build_image.sh, cached by
# the hash of its inputs); `make image-test` builds it when this tree changed it and tests it from inside.
# `make test` ends with both (scripts/run_tests.sh).
.PHONY: setup setup-main demo test test-fast lint image image-test

# the test toolchain too (Horovod, the Petastorm and Spark 3.5 environments, buildah, Chromium, the DeepSpeed op)
setup:
	bash scripts/setup.sh

# what the demo runs on: Java and the main environment
setup-main:
	bash scripts/setup.sh --main

demo: setup-main
	.venv/bin/python examples/digits_pipeline.py

# mypy's cache outlives the clone (fresh CI clones check in seconds what they did not change)
lint: export MYPY_CACHE_DIR = $(or $(SPARKRUNNER_CACHE),$(HOME)/.cache/sparkrunner)/mypy
lint:
	.venv/bin/ruff check sparkrunner tests bench examples
	.venv/bin/ruff format --check sparkrunner tests bench examples
	.venv/bin/mypy
	.venv/bin/mypy tests/programs  # the programs tests run as subprocesses
	.venv/bin/mypy bench  # the benchmarks: a stand-in that misses part of an interface hangs them

image: setup
	bash docker/build_image.sh

image-test: image
	SPARKRUNNER_IMAGE_TESTS=1 bash scripts/run_tests.sh tests/scenarios/image

# each phase prints its duration (scripts/phase.sh); run_tests.sh times its own phases the same way
test:
	@bash scripts/phase.sh setup $(MAKE) --no-print-directory setup
	@bash scripts/phase.sh lint $(MAKE) --no-print-directory lint
	bash scripts/run_tests.sh

# everything but the tests marked slow (a Spark start-up, mpirun, or more than ~5 s): under 3 minutes
test-fast: setup
	bash scripts/run_tests.sh -m "not slow"
