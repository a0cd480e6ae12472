# make demo: set up .venv and run loopwatch on the bundled examples.
# make test: set up .venv, then lint, type-check and run the whole test suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test lint services bench clean

SEMANTIC_STAMP := $(VENV)/.installed-semantic-stamp

# google-adk pins OpenTelemetry <= 1.44 and the dev extra's langfuse 5 needs >= 1.45:
# the Google ADK adapter is type-checked and tested in a virtualenv of its own.
ADK_VENV := .venv-adk
ADK_STAMP := $(ADK_VENV)/.installed-stamp

# A framework's own virtualenv: $(1) the folder, $(2) the extra; the tools to test it there.
define own_venv
	test -x $(1)/bin/python || $(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install --quiet --upgrade pip
	$(1)/bin/python -m pip install --quiet -e '.[$(2)]' 'pytest>=8' \
		'pytest-asyncio' 'hypothesis>=6.100' 'mypy>=1.10'
	touch $(1)/.installed-stamp
endef

$(ADK_STAMP): pyproject.toml
	$(call own_venv,$(ADK_VENV),google-adk)

# crewai pins pydantic below the dev environment's and pulls chromadb, lancedb, onnxruntime:
# the CrewAI adapter is type-checked and tested in a virtualenv of its own too.
CREWAI_VENV := .venv-crewai
CREWAI_STAMP := $(CREWAI_VENV)/.installed-stamp

$(CREWAI_STAMP): pyproject.toml
	$(call own_venv,$(CREWAI_VENV),crewai)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The semantic layer's tests need torch: the CPU build 2.13.0 is the one this
# machine kind has on disk (a bare `torch` would pull a multi-GB CUDA build).
$(SEMANTIC_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev,semantic]'
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

test: lint services $(SEMANTIC_STAMP)
	$(BIN)/python -m pytest
	$(ADK_VENV)/bin/python -m pytest tests/test_integration_google_adk.py
	$(CREWAI_VENV)/bin/python -m pytest tests/test_integration_crewai.py

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

clean:
	rm -rf $(VENV) $(ADK_VENV) $(CREWAI_VENV) build *.egg-info src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
