//! The reader's source goes into this crate with `include!`, which cannot take its inner
//! doc comment (`//!`): copy its root (../src/lib.rs) without those lines, and point each of
//! its `mod name;` declarations at ../src/name.rs by absolute path (from the copy, a plain
//! `mod name;` would be looked for beside it). Also point the binaries at the interpreter's
//! library, which they embed.

use std::{env, fs, path::Path};

/// `name` when the line declares an out-of-line module (`mod name;`, `pub(crate) mod name;`).
fn module_declared(line: &str) -> Option<&str> {
    let line = line.trim();
    let rest = match line.find("mod ") {
        Some(0) => &line[4..],
        Some(at) if line[..at].trim_end().starts_with("pub") => &line[at + 4..],
        _ => return None,
    };
    let name = rest.strip_suffix(';')?.trim();
    let plain = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    plain.then_some(name)
}

fn main() {
    let manifest_dir = env::var("CARGO_MANIFEST_DIR").unwrap();
    let src = Path::new(&manifest_dir)
        .join("../src")
        .canonicalize()
        .expect("find ../src");
    let source = src.join("lib.rs");
    // The modules are read by rustc itself, which tracks them; only the root is copied.
    println!("cargo:rerun-if-changed={}", source.display());
    let text = fs::read_to_string(&source).expect("read ../src/lib.rs");
    let kept: String = text
        .lines()
        .filter(|line| !line.trim_start().starts_with("//!"))
        .map(|line| match module_declared(line) {
            Some(name) => {
                let path = src.join(format!("{name}.rs"));
                let path = path.to_str().expect("a UTF-8 path");
                format!("#[path = {path:?}]\n{line}\n")
            }
            None => format!("{line}\n"),
        })
        .collect();
    let out = Path::new(&env::var("OUT_DIR").unwrap()).join("native.rs");
    fs::write(out, kept).expect("write native.rs");

    let config = pyo3_build_config::get();
    if let Some(lib_dir) = config.lib_dir() {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib_dir}");
    }
}
