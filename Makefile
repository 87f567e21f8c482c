# Every target creates what it needs on a fresh clone: a pinned uv in .tools/, then the
# locked environment in .venv/ (uv.lock pins every dependency's version).
SHELL := /bin/bash
export UV_PYTHON_DOWNLOADS := never
# mkdocs-material prints a banner about its successor on every build; the build is quiet.
export NO_MKDOCS_2_WARNING := 1
UV_VERSION := 0.13.9
UV := .tools/bin/uv
PY := .venv/bin/python

.PHONY: demo test lint docs bench bench-peers bench-cluster sync clean browser

demo: sync
	$(UV) run --locked satsuma demo

# The tests run in one worker process per CPU (at most 4), a test module per worker at a
# time so that a module's fixtures (servers, databases) start once: most tests wait on
# subprocesses, sockets and PostgreSQL, so two workers on two CPUs halve the wall time.
test: sync lint docs browser
	$(UV) run --locked pytest --numprocesses=auto --maxprocesses=4 --dist=loadscope

# The console's tests drive a real headless Chromium: Debian's packages, installed when
# missing (CI runs as root; elsewhere the tests fail naming this command).
browser:
	@if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then \
		apt-get update -qq && apt-get install -y -qq chromium chromium-driver; fi

lint: sync
	$(UV) run --locked ruff check src tests benchmarks examples
	$(UV) run --locked ruff format --check src tests benchmarks examples
	$(UV) run --locked mypy

# The documentation site, into .site/ (ignored): --strict fails on any warning, such as a
# broken link, a page missing from the nav or a docstring griffe cannot read.
docs: sync
	$(UV) run --locked mkdocs build --strict --quiet

bench: sync
	$(UV) run --locked python benchmarks/runner_overhead.py
	$(UV) run --locked python benchmarks/agent_loop.py
	$(UV) run --locked python benchmarks/supervisor.py
	$(UV) run --locked python benchmarks/store.py
	$(UV) run --locked python benchmarks/builtin_tools.py
	$(UV) run --locked python benchmarks/long_lived.py
	$(UV) run --locked python benchmarks/default_path.py

# satsuma next to the libraries users would pick instead (~30 minutes here); rewrites
# docs/benchmarks.md with the figures and the machine's description.
bench-peers: sync
	$(UV) run --locked python benchmarks/run.py

# Node processes on a PostgreSQL server (SATSUMA_TEST_POSTGRES_DSN's, else a throwaway
# one it starts): runs/s over 1-3 nodes, cluster.run's latency, takeover (~5 minutes).
bench-cluster: sync
	$(UV) run --locked python benchmarks/cluster.py

sync: $(UV)
	$(UV) sync --locked --quiet

$(UV):
	python3 -m venv .tools
	.tools/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

clean:
	rm -rf .tools .venv .pytest_cache .mypy_cache .ruff_cache .site
