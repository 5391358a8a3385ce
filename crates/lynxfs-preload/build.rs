//! Compiles the C part (the exec functions whose arguments are a variadic list) and
//! links the unwinder in statically.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=src/exec_list.c");
    cc::Build::new()
        .file("src/exec_list.c")
        .flag_if_supported("-Wall")
        .flag_if_supported("-Wextra")
        .compile("lynxfs_exec_list");
    static_unwinder();
}

/// Rust's standard library links the unwinder as `-lgcc_s`, so every program the
/// library is preloaded into would load libgcc_s.so.1 too, whose constructor
/// (`__cpu_indicator_init`) runs a dozen CPUID instructions: under a hypervisor each
/// one exits to it (11 us apiece on the project's VM), 0.1 ms of every process start.
/// A `libgcc_s` found first in this build's own directory, a linker script naming
/// GCC's static unwinder (`libgcc_eh.a`, built to go into shared objects), links
/// those few functions into the library instead (kept local to it by the cdylib's
/// export list).
fn static_unwinder() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux")
        || std::env::var("CARGO_CFG_TARGET_ENV").as_deref() != Ok("gnu")
    {
        return;
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let dir = out.join("unwinder");
    std::fs::create_dir_all(&dir).expect("unwinder directory");
    std::fs::write(dir.join("libgcc_s.so"), "INPUT(-lgcc_eh)\n").expect("libgcc_s.so script");
    println!("cargo:rustc-link-search=native={}", dir.display());
}
