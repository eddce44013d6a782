# The two commands of the README, plus the steps they stand on. Everything installs itself:
# a Python virtualenv with the project and its dev tools, and the pinned JVM jars.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test lint unit integration jvm clean

demo: $(VENV)/.installed jvm          ## end to end on this machine (Kafka + embedded Flink)
	$(BIN)/anchorwatch demo

test: lint $(VENV)/.installed jvm     ## lint, types, unit and integration tests
	$(BIN)/pytest

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

unit: $(VENV)/.installed
	$(BIN)/pytest -m "not integration"

integration: $(VENV)/.installed jvm
	$(BIN)/pytest -m integration

jvm: $(VENV)/.installed
	$(BIN)/anchorwatch jvm fetch

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

clean:
	-$(BIN)/anchorwatch stack down
	rm -rf $(VENV) .anchorwatch build *.egg-info
