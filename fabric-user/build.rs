//! Builds the XDP object from `fabric-ebpf` (nightly, build-std, bpfel) into OUT_DIR so that
//! `src/dataplane/mod.rs` can embed it. `AYA_BUILD_SKIP=1` skips this for `cargo check`/clippy
//! without bpf-linker; the loader then refuses to run with a message saying so.
use std::{env, fs, path::PathBuf};

fn main() -> anyhow::Result<()> {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let skip = env::var("AYA_BUILD_SKIP").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
    if skip {
        fs::write(out_dir.join("fabric-switch"), [])?;
    }
    let root = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    // The Chakra execution-trace schema (src/trace): protox compiles it in Rust, so no protoc.
    let proto = root.join("proto/et_def.proto");
    println!("cargo:rerun-if-changed={}", proto.display());
    let fds = protox::compile([&proto], [root.join("proto")])?;
    prost_build::Config::new().compile_fds(fds)?;
    let ebpf_dir = root.parent().expect("workspace root").join("fabric-ebpf");
    println!("cargo:rerun-if-changed={}", root.parent().unwrap().join("fabric-common/src").display());
    // aya-build relays every line the nested cargo prints as a `cargo:warning`, so a first build
    // would flood the terminal with "warning: fabric-user@0.1.0: Compiling ..." lines. Quiet, the
    // nested cargo prints only what matters (compiler warnings and errors, as JSON messages
    // aya-build still relays); the outer cargo's progress bar shows the build script running.
    // SAFETY: build scripts are single-threaded here: no other thread reads the environment.
    unsafe { env::set_var("CARGO_TERM_QUIET", "true") };
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "fabric-ebpf",
            root_dir: ebpf_dir.to_str().expect("utf-8 path"),
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    )
    .map_err(|e| {
        anyhow::anyhow!(
            "building the XDP program failed: {e:#}\n\
             (run `cargo xtask setup` to install rust-src and bpf-linker)"
        )
    })
}
