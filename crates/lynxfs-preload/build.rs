//! Compiles the C part: the exec functions whose arguments are a variadic list.

fn main() {
    println!("cargo:rerun-if-changed=src/exec_list.c");
    cc::Build::new()
        .file("src/exec_list.c")
        .flag_if_supported("-Wall")
        .flag_if_supported("-Wextra")
        .compile("lynxfs_exec_list");
}
