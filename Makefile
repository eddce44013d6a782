# The two commands of the README, plus the steps they stand on. Everything installs itself:
# a Python virtualenv with the project and its dev tools (installing the project compiles
# its Rust extension, connectors/native: cargo must be on PATH), and the pinned JVM jars.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
NATIVE := connectors/native

.PHONY: demo test system lint unit integration jvm jvm-test clean fuzz fuzz-corpus mutate

demo: $(VENV)/.installed jvm          ## the whole pipeline as deployed, end to end, on this machine
	$(BIN)/anchorwatch demo

test: system lint $(VENV)/.installed jvm jvm-test  ## lint, types, unit and integration tests
	$(BIN)/pytest

# The system packages the tests use beyond the build (README, The two commands): a clear
# list of what is missing instead of a failure deep inside a test.
system:
	@missing=""; \
	for p in java:openjdk-17-jre-headless mvn:maven promtool:prometheus \
	         amtool:prometheus-alertmanager shellcheck:shellcheck \
	         chromium:chromium chromedriver:chromium-driver openssl:openssl; do \
	  command -v $${p%%:*} >/dev/null || missing="$$missing $${p#*:}"; done; \
	command -v go >/dev/null || [ -x /usr/local/go/bin/go ] || missing="$$missing golang-go"; \
	command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
	  missing="$$missing postgresql"; \
	if [ -n "$$missing" ]; then echo "missing system packages; Debian: apt-get install$$missing"; exit 1; fi

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python -m tools.check_house  # file and doc sizes, who may import the demo and whom
	cargo fmt --manifest-path $(NATIVE)/Cargo.toml --check
	cargo clippy --manifest-path $(NATIVE)/Cargo.toml --release --locked -- -D warnings

unit: $(VENV)/.installed
	$(BIN)/pytest -m "not integration"

integration: $(VENV)/.installed jvm
	$(BIN)/pytest -m integration

jvm: $(VENV)/.installed
	$(BIN)/anchorwatch jvm fetch

jvm-test:  ## the drift job's Java unit tests (the jar itself builds without JUnit)
	mvn -q -f jobs/jvm/pom.xml test

$(VENV)/.installed: pyproject.toml $(NATIVE)/Cargo.toml $(NATIVE)/Cargo.lock $(wildcard $(NATIVE)/src/*.rs)
	@command -v cargo >/dev/null || { echo "cargo not found: installing anchorwatch compiles its Rust extension (Rust >= 1.85, e.g. through rustup)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

# Coverage-guided fuzzing of the ingest reader (docs/ingest.md, Fuzzing): each target for
# FUZZ_SECONDS on the committed corpus and what earlier runs added (fuzz/corpus/.work/, not
# committed), then every input replayed through both paths. Needs cargo-fuzz and nightly.
FUZZ_SECONDS ?= 60
FUZZ_RUN = cd $(NATIVE) && PYO3_PYTHON=$(abspath $(BIN)/python) ASAN_OPTIONS=detect_leaks=0 cargo +nightly fuzz

fuzz: $(VENV)/.installed
	@command -v cargo-fuzz >/dev/null || { echo "cargo-fuzz not found: cargo install cargo-fuzz; rustup toolchain install nightly"; exit 1; }
	for t in kong ndjson; do mkdir -p $(NATIVE)/fuzz/corpus/.work/$$t; \
	  ($(FUZZ_RUN) run $$t fuzz/corpus/.work/$$t fuzz/corpus/$$t -- -dict=fuzz/$$t.dict \
	    -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1) || exit 1; done
	$(BIN)/python -m bench.fuzz_ingest replay

# Fold what `make fuzz` found into the committed corpus, minimised (cargo fuzz cmin) to
# the fewest inputs that reach every edge the whole reached.
fuzz-corpus: $(VENV)/.installed
	for t in kong ndjson; do cp -n $(NATIVE)/fuzz/corpus/.work/$$t/* $(NATIVE)/fuzz/corpus/$$t/ 2>/dev/null; \
	  ($(FUZZ_RUN) cmin $$t fuzz/corpus/$$t -- -use_counters=0) || exit 1; done

# Mutation testing (docs/testing.md): mutmut over contracts, policy and the alerting outbox
# and store, cargo-mutants over connectors/native, with the unit tests, in a scratch copy of
# HEAD; MUTATE_SAMPLE mutants per Python module (fixed seed), shard MUTATE_SHARD of Rust's (every 6th).
MUTATE_SAMPLE ?= 60
MUTATE_SHARD ?= 0/6
mutate: $(VENV)/.installed
	@command -v cargo-mutants >/dev/null || { echo "cargo-mutants not found: cargo install cargo-mutants --locked"; exit 1; }
	$(BIN)/python -m tools.mutate --sample $(MUTATE_SAMPLE) --native-shard $(MUTATE_SHARD)

clean:
	-$(BIN)/anchorwatch stack down
	rm -rf $(VENV) .anchorwatch build *.egg-info $(NATIVE)/target connectors/_native*.so
