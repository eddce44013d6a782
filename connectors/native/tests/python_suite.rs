//! The Python unit tests of the ingest path, run against this crate as built now: how
//! `make mutate` lets cargo-mutants judge each mutant of `src/` by the tests that hold the
//! compiled reader to the contract (docs/testing.md). Cargo's own harness cannot load the
//! extension, so this test builds it (`cargo build --lib`), puts it where Python imports it
//! (`connectors/_native.abi3.so` of the checkout this crate sits in) and runs pytest there.
//!
//! It does nothing unless MUTATE_PYTHON names the Python to run pytest with: a plain
//! `cargo test` stays free of Python. Run it in a scratch checkout only (cargo mutants
//! --in-place, as `make mutate` does): it replaces that checkout's compiled module.

use std::env;
use std::path::Path;
use std::process::Command;

// The tests that exercise the compiled reader, cheapest and most pointed first (pytest -x
// stops at the first failure). MUTATE_NATIVE_TESTS replaces the list.
const TESTS: &str = "tests/unit/anchorwatch/contracts/test_contract_rules.py tests/unit/connectors/test_validation.py \
                     tests/unit/connectors/test_records.py tests/unit/connectors/test_kong.py \
                     tests/unit/connectors/test_fastpath.py";

#[test]
fn python_unit_tests_pass_against_this_build() {
    let Ok(python) = env::var("MUTATE_PYTHON") else {
        eprintln!("MUTATE_PYTHON not set: nothing to run");
        return;
    };
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let checkout = crate_dir.join("../..").canonicalize().unwrap();
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let built = Command::new(cargo)
        .args(["build", "--lib", "--quiet", "--manifest-path"])
        .arg(crate_dir.join("Cargo.toml"))
        .env("PYO3_PYTHON", &python)
        .status()
        .unwrap();
    assert!(built.success(), "cargo build --lib failed");
    let target = env::var("CARGO_TARGET_DIR")
        .map(Into::into)
        .unwrap_or_else(|_| crate_dir.join("target"));
    std::fs::copy(
        Path::new(&target).join("debug/lib_native.so"),
        checkout.join("connectors/_native.abi3.so"),
    )
    .unwrap();
    let tests = env::var("MUTATE_NATIVE_TESTS").unwrap_or_else(|_| TESTS.into());
    // append: the checkout on PYTHONPATH, not the installed project, is what gets imported.
    let status = Command::new(&python)
        .args(["-m", "pytest", "-x", "-q", "-p", "no:cacheprovider"])
        .args([
            "--import-mode=append",
            "--hypothesis-seed=0",
            "-m",
            "not integration",
        ])
        .args(tests.split_whitespace())
        .current_dir(&checkout)
        .env("PYTHONPATH", &checkout)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "the Python unit tests failed against this build"
    );
}
