# make demo: set up .venv and run loopwatch on the bundled examples.
# make test: set up .venv, then lint, type-check and run the whole test suite on the
# compiled core, then the core tests again on the pure-Python build, and build the docs.
# make docs: the documentation site (mkdocs-material, --strict) into site/.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test lint services docs bench bench-competitors clean

SEMANTIC_STAMP := $(VENV)/.installed-semantic-stamp

# google-adk pins OpenTelemetry <= 1.44 and the dev extra's langfuse 5 needs >= 1.45:
# the Google ADK adapter is type-checked and tested in a virtualenv of its own. It
# installs without compiling (LOOPWATCH_PURE): the editable install shares src/, where
# the main environment's build already put the compiled core.
ADK_VENV := .venv-adk
ADK_STAMP := $(ADK_VENV)/.installed-stamp

# A framework's own virtualenv: $(1) the folder, $(2) the extra, $(3) what only its tests
# need; the tools to test it there.
define own_venv
	test -x $(1)/bin/python || $(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install --quiet --upgrade pip
	LOOPWATCH_PURE=1 $(1)/bin/python -m pip install --quiet -e '.[$(2)]' 'pytest>=8' \
		'pytest-asyncio' 'hypothesis>=6.100' 'mypy>=2.4.1,<2.5' $(3)
	touch $(1)/.installed-stamp
endef

# Test-only: the export test writes ADK's own spans (its built-in tracing) as OTLP JSON
# with the OTLP exporter's encoder, of the release line google-adk holds the SDK at.
ADK_TEST_ONLY := 'opentelemetry-exporter-otlp-proto-common>=1.37,<1.45'

$(ADK_STAMP): pyproject.toml Makefile
	$(call own_venv,$(ADK_VENV),google-adk,$(ADK_TEST_ONLY))

# crewai pins pydantic below the dev environment's and pulls chromadb, lancedb, onnxruntime:
# the CrewAI adapter is type-checked and tested in a virtualenv of its own too.
CREWAI_VENV := .venv-crewai
CREWAI_STAMP := $(CREWAI_VENV)/.installed-stamp

# Test-only: CrewAI's own telemetry goes to CrewAI, not to a user's trace; its users export
# traces with OpenInference's instrumentor, whose spans the export test scans. Pinned to a
# minor: a new release may change the spans, and CI (a fresh install) must not meet that
# first. The encoder writes those spans as OTLP JSON.
CREWAI_TEST_ONLY := 'openinference-instrumentation-crewai>=1.1.21,<1.2' \
	'opentelemetry-exporter-otlp-proto-common>=1.37'

$(CREWAI_STAMP): pyproject.toml Makefile
	$(call own_venv,$(CREWAI_VENV),crewai,$(CREWAI_TEST_ONLY))

# The hot path is compiled (mypyc, setup.py) by `pip install -e`: the stamp depends
# on its sources, so an edited source is rebuilt before the tests run, never shadowed
# by an older compiled module (tests/core/test_build.py checks that too).
COMPILED_SOURCES := $(wildcard src/loopwatch/*.py src/loopwatch/detectors/*.py)

$(STAMP): pyproject.toml setup.py $(COMPILED_SOURCES)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,docs]'
	touch $(STAMP)

# The semantic layer's tests need torch: the CPU build 2.13.0 is the one this
# machine kind has on disk (a bare `torch` would pull a multi-GB CUDA build).
# Order-only on the main stamp: an edited source rebuilds the core once, not twice.
$(SEMANTIC_STAMP): pyproject.toml | $(STAMP)
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev,docs,semantic]'
	touch $(SEMANTIC_STAMP)

demo: $(STAMP)
	$(BIN)/loopwatch demo

lint: $(STAMP) $(ADK_STAMP) $(CREWAI_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(ADK_VENV)/bin/mypy src/loopwatch/integrations/google_adk.py
	$(CREWAI_VENV)/bin/mypy src/loopwatch/integrations/crewai.py

# Services the tests need (redis-server, chromium...): each scripts/services.d/*.sh
# installs what is missing. pytest exits 5 when it collects no test: make fails on it.
services:
	bash scripts/ensure_services.sh

# The tests that pin detection (scenarios, detectors, parity, state, turns, unknown
# values, guard, scan) run a second time on the pure-Python fallback, which is what
# a machine without a compiler installs; tests/core/test_build.py compares both builds.
PURE_TESTS := tests/detectors/test_conformance.py tests/detectors/test_detectors.py \
	tests/core/test_parity.py tests/core/test_state.py tests/detectors/test_turns.py \
	tests/core/test_unknown.py tests/detectors/test_futility.py tests/detectors/test_handoff.py \
	tests/detectors/test_spend.py tests/core/test_events.py tests/core/test_guard.py \
	tests/core/test_scan.py tests/core/test_config.py tests/core/test_public_api.py \
	tests/core/test_build.py tests/detectors/test_kinds.py tests/core/test_no_silent_ok.py

# The site is built with --strict: a broken link, a page missing from the nav or a
# docstring the API reference cannot read fails it. Its snippets run in tests/core/test_docs.py.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

test: lint services $(SEMANTIC_STAMP) docs
	$(BIN)/python -m pytest
	LOOPWATCH_PURE=1 $(BIN)/python -m pytest $(PURE_TESTS)
	$(ADK_VENV)/bin/python -m pytest tests/integrations/test_integration_google_adk.py
	$(CREWAI_VENV)/bin/python -m pytest tests/integrations/test_integration_crewai.py

# Benchmarks print numbers; none of them is part of `make test`.
bench: $(STAMP)
	$(BIN)/python benchmarks/bench_guard.py
	$(BIN)/python benchmarks/bench_scan.py
	$(BIN)/python benchmarks/quality.py
	$(BIN)/python benchmarks/bench_formats.py
	$(BIN)/python benchmarks/bench_big_text.py
	$(BIN)/python benchmarks/bench_soak.py
	$(BIN)/python benchmarks/bench_report.py
	bash scripts/services.d/redis.sh && $(BIN)/python benchmarks/bench_redis.py

# Side by side with other PyPI loop guards, per tool call. They are installed into a
# throwaway folder for the benchmark only, never as loopwatch's dependencies.
bench-competitors: $(STAMP)
	$(BIN)/pip install --quiet --target .bench-competitors agent-watchdog==0.1.5 loopguard==0.2.0
	$(BIN)/python benchmarks/bench_competitors.py

clean:
	rm -rf $(VENV) $(ADK_VENV) $(CREWAI_VENV) build site *.egg-info src/*.egg-info .pytest_cache .mypy_cache .ruff_cache .bench-competitors
	find src -name '*.so' -delete -o -name '*.pyd' -delete
