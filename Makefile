# The two commands of the README, plus the steps they stand on. Everything installs itself:
# a Python virtualenv with the project and its dev tools (installing the project compiles
# its Rust extension, connectors/native: cargo must be on PATH), and the pinned JVM jars.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
NATIVE := connectors/native

.PHONY: demo test lint unit integration jvm clean

demo: $(VENV)/.installed jvm          ## end to end on this machine (Kafka + embedded Flink)
	$(BIN)/anchorwatch demo

test: lint $(VENV)/.installed jvm     ## lint, types, unit and integration tests
	$(BIN)/pytest

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	cargo fmt --manifest-path $(NATIVE)/Cargo.toml --check
	cargo clippy --manifest-path $(NATIVE)/Cargo.toml --release --locked -- -D warnings

unit: $(VENV)/.installed
	$(BIN)/pytest -m "not integration"

integration: $(VENV)/.installed jvm
	$(BIN)/pytest -m integration

jvm: $(VENV)/.installed
	$(BIN)/anchorwatch jvm fetch

$(VENV)/.installed: pyproject.toml $(NATIVE)/Cargo.toml $(NATIVE)/Cargo.lock $(wildcard $(NATIVE)/src/*.rs)
	@command -v cargo >/dev/null || { echo "cargo not found: installing anchorwatch compiles its Rust extension (Rust >= 1.85, e.g. through rustup)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

clean:
	-$(BIN)/anchorwatch stack down
	rm -rf $(VENV) .anchorwatch build *.egg-info $(NATIVE)/target connectors/_native*.so
