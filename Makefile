# FreeLLM: `make run` serves the gateway on the embedded defaults; `make test` runs the suite.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: run test lint format bench e2e-agents clean

$(VENV)/.runtime: requirements.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "FreeLLM needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

$(VENV)/.dev: $(VENV)/.runtime requirements-dev.txt
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

run: $(VENV)/.runtime
	$(PY) manage.py serve

test: $(VENV)/.dev
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(VENV)/.dev
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

bench: $(VENV)/.dev
	@command -v wrk >/dev/null || { echo "wrk is missing; installing it from Debian's packages"; \
		apt-get install -y -q wrk >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q wrk >/dev/null; }; }
	$(PY) bench/run.py

# Claude Code and Codex CLI, installed from the npm registry into .e2e/, run headless against the
# gateway on a scripted fake upstream (e2e/agents.py). Not part of `make test`.
E2E_CLIENTS = @anthropic-ai/claude-code@2.1.197 @openai/codex@0.171.0
e2e-agents: $(VENV)/.dev
	mkdir -p .e2e
	npm install --prefix .e2e --no-audit --no-fund --silent $(E2E_CLIENTS)
	$(PY) e2e/agents.py

format: $(VENV)/.dev
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV)
