//! The reader's source goes into this crate with `include!`, which cannot take its inner
//! doc comment (`//!`): copy it without those lines. Also point the binaries at the
//! interpreter's library, which they embed.

use std::{env, fs, path::Path};

fn main() {
    let source = Path::new("../src/lib.rs");
    println!("cargo:rerun-if-changed={}", source.display());
    let text = fs::read_to_string(source).expect("read ../src/lib.rs");
    let kept: String = text
        .lines()
        .filter(|line| !line.trim_start().starts_with("//!"))
        .map(|line| format!("{line}\n"))
        .collect();
    let out = Path::new(&env::var("OUT_DIR").unwrap()).join("native.rs");
    fs::write(out, kept).expect("write native.rs");

    let config = pyo3_build_config::get();
    if let Some(lib_dir) = config.lib_dir() {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib_dir}");
    }
}
