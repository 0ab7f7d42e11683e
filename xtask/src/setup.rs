//! `cargo xtask setup`: everything a fresh Debian/Ubuntu machine needs, idempotently.
//!
//! cargo-mutants (for `cargo xtask mutants`) is a plain `cargo install --locked` from crates.io.
//!
//! bpf-linker is built against the nightly toolchain's own libLLVM: no LLVM download is needed
//! (or possible on a closed network), and the linker's LLVM then matches rustc's exactly.
use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{Context as _, Result, bail};

use crate::util::{output, run as run_cmd, succeeds};

/// Debian packages the build and tests use: `ip` for fixtures, tshark as the reference decoder,
/// tcpdump and ethtool for inspecting a testbed, and a C++ compiler for the fuzz targets'
/// libFuzzer (`cargo xtask fuzz`, which CI runs).
const APT_PACKAGES: &[&str] = &["iproute2", "tshark", "tcpdump", "ethtool", "g++"];
/// Headless Chromium for the live view's browser test (`fabric-user/tests/ui.rs`): Debian's
/// package of this name.
const BROWSER_PACKAGE: &str = "chromium";
const NIGHTLY: &str = "nightly";
/// The bpf-linker release whose `llvm-NN` features match the nightly toolchains we build with.
const BPF_LINKER_VERSION: &str = "0.13.0";
/// The cargo-mutants release for `cargo xtask mutants`, checked to build with stable 1.95, the
/// workspace's `rust-version` (it needs rustc 1.88 or later).
const CARGO_MUTANTS_VERSION: &str = "27.1.0";

pub fn run() -> Result<()> {
    let start = Instant::now();
    let mut did = Vec::new();
    check_disk_space();
    apt(&mut did)?;
    nightly(&mut did)?;
    bpf_linker(&mut did)?;
    cargo_mutants(&mut did)?;
    if did.is_empty() {
        println!("setup: everything was already in place ({:.1?})", start.elapsed());
    } else {
        println!("setup: {} ({:.1?})", did.join("; "), start.elapsed());
    }
    Ok(())
}

/// Free space a clean clone's build, fuzz and test run need: `target/` measured 3.4 GiB after
/// `.ci/run`, with room for rustc's temporaries and a first build's registry downloads.
const BUILD_NEEDS_GIB: u64 = 6;

/// Warns, up front and by name, when the disk is too full to build: otherwise the run fails
/// minutes later with an LLVM "IO failure on output stream". A warning, not an error: a
/// `target/` already built needs less.
fn check_disk_space() {
    // Where the build goes: target/ (or CARGO_TARGET_DIR) once it exists, else the workspace.
    let target = crate::util::release_dir().parent().map(Path::to_path_buf);
    let root = target.filter(|t| t.exists()).unwrap_or_else(crate::util::workspace_root);
    let Ok(df) = output(Command::new("df").args(["-Pk"]).arg(&root)) else { return };
    let Some(free_gib) = free_gib(&df) else { return };
    if free_gib < BUILD_NEEDS_GIB as f64 {
        println!(
            "setup: warning: only {free_gib:.1} GiB free on the file system of {}; a clean build and test \
             run needs about {BUILD_NEEDS_GIB} GiB for target/",
            root.display()
        );
    }
}

/// The free space `df -Pk` reports for its one file system, GiB.
fn free_gib(df: &str) -> Option<f64> {
    let free_kib: u64 = df.lines().nth(1)?.split_whitespace().nth(3)?.parse().ok()?;
    Some(free_kib as f64 / (1024.0 * 1024.0))
}

fn apt(did: &mut Vec<String>) -> Result<()> {
    apt_install(APT_PACKAGES, did)?;
    // A `chromium` that already runs will do: some CI images ship one outside apt, and on
    // Ubuntu the package of that name is only a wrapper around a snap.
    if !succeeds(Command::new("chromium").arg("--version")) {
        apt_install(&[BROWSER_PACKAGE], did)?;
    }
    Ok(())
}

/// Installs whichever of `packages` are missing (apt-get update first, non-interactive).
pub fn apt_install(packages: &[&str], did: &mut Vec<String>) -> Result<()> {
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|p| {
            !output(Command::new("dpkg-query").args(["-W", "-f=${Status}", p]))
                .is_ok_and(|s| s.contains("install ok installed"))
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !crate::util::is_root() {
        bail!("setup needs root to install the Debian packages {}", missing.join(" "));
    }
    println!("setup: installing Debian packages: {}", missing.join(" "));
    let noninteractive = |c: &mut Command| {
        c.env("DEBIAN_FRONTEND", "noninteractive");
    };
    let mut update = Command::new("apt-get");
    update.args(["update", "-q"]);
    noninteractive(&mut update);
    run_cmd(&mut update)?;
    let mut install = Command::new("apt-get");
    install.args(["install", "-y", "-q", "--no-install-recommends"]).args(&missing);
    noninteractive(&mut install);
    run_cmd(&mut install)?;
    did.push(format!("installed {}", missing.join(" ")));
    Ok(())
}

fn nightly(did: &mut Vec<String>) -> Result<()> {
    if !succeeds(Command::new("rustup").arg("--version")) {
        bail!("rustup is missing: install it (https://rustup.rs) so the nightly toolchain can be added");
    }
    if !succeeds(Command::new("rustc").args([&format!("+{NIGHTLY}"), "--version"])) {
        println!("setup: installing the {NIGHTLY} toolchain");
        run_cmd(Command::new("rustup").args(["toolchain", "install", NIGHTLY, "--profile", "minimal"]))?;
        did.push(format!("installed the {NIGHTLY} toolchain"));
    }
    let installed = output(Command::new("rustup").args(["component", "list", "--installed", "--toolchain", NIGHTLY]))?;
    if !installed.lines().any(|l| l.trim() == "rust-src") {
        println!("setup: adding rust-src to {NIGHTLY} (for -Z build-std=core)");
        run_cmd(Command::new("rustup").args(["component", "add", "rust-src", "--toolchain", NIGHTLY]))?;
        did.push("added rust-src".into());
    }
    Ok(())
}

/// The nightly toolchain's libLLVM shared object and its major version.
fn toolchain_llvm() -> Result<(PathBuf, u32)> {
    let sysroot = output(Command::new("rustc").args([&format!("+{NIGHTLY}"), "--print", "sysroot"]))?;
    let lib = Path::new(sysroot.trim()).join("lib");
    let mut found = None;
    for entry in std::fs::read_dir(&lib).with_context(|| format!("reading {}", lib.display()))? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        // libLLVM.so.22.1-rust-1.97.0-nightly
        if let Some(rest) = name.strip_prefix("libLLVM.so.")
            && let Some(major) = rest.split('.').next().and_then(|m| m.parse::<u32>().ok())
        {
            found = Some((lib.join(&name), major));
        }
    }
    found.with_context(|| {
        format!(
            "no libLLVM.so.* in {}: the {NIGHTLY} toolchain lacks its LLVM library (reinstall it with rustup)",
            lib.display()
        )
    })
}

/// bpf-linker loads the toolchain's libLLVM, which is found through the library path that
/// `rustup run nightly` sets (as the eBPF build runs it); so probe it the same way.
fn bpf_linker_runs() -> bool {
    succeeds(Command::new("rustup").args(["run", NIGHTLY, "bpf-linker", "--version"]))
}

fn bpf_linker(did: &mut Vec<String>) -> Result<()> {
    if bpf_linker_runs() {
        return Ok(());
    }
    let (libllvm, major) = toolchain_llvm()?;
    let home = std::env::var_os("HOME").context("HOME is not set")?;
    let prefix = PathBuf::from(home).join(".cache/fabric/llvm-prefix");
    let link = prefix.join("lib/libLLVM.so");
    std::fs::create_dir_all(prefix.join("lib"))?;
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&libllvm, &link)
        .with_context(|| format!("linking {} -> {}", link.display(), libllvm.display()))?;
    println!(
        "setup: building bpf-linker {BPF_LINKER_VERSION} against {} (LLVM {major}); this takes a few minutes",
        libllvm.display()
    );
    run_cmd(
        Command::new("cargo")
            .env("LLVM_PREFIX", &prefix)
            .args(["install", "--force", "bpf-linker", "--version", BPF_LINKER_VERSION])
            .args(["--no-default-features", "--features", &format!("llvm-{major}")]),
    )
    .with_context(|| format!("building bpf-linker with feature llvm-{major}"))?;
    if !bpf_linker_runs() {
        bail!("bpf-linker was built but `rustup run {NIGHTLY} bpf-linker --version` fails (is ~/.cargo/bin on PATH?)");
    }
    did.push(format!("built bpf-linker against LLVM {major}"));
    Ok(())
}

/// cargo-mutants (mutation testing of fabric-common and fabric-roce), from crates.io with its own
/// lock file; skipped when `cargo mutants --version` already works.
pub fn cargo_mutants(did: &mut Vec<String>) -> Result<()> {
    if succeeds(Command::new("cargo").args(["mutants", "--version"])) {
        return Ok(());
    }
    println!("setup: installing cargo-mutants {CARGO_MUTANTS_VERSION} (cargo install --locked; a few minutes)");
    run_cmd(Command::new("cargo").current_dir(crate::util::workspace_root()).args([
        "install",
        "--locked",
        "cargo-mutants",
        "--version",
        CARGO_MUTANTS_VERSION,
    ]))
    .context("installing cargo-mutants")?;
    if !succeeds(Command::new("cargo").args(["mutants", "--version"])) {
        bail!("cargo-mutants was installed but `cargo mutants --version` fails (is ~/.cargo/bin on PATH?)");
    }
    did.push(format!("installed cargo-mutants {CARGO_MUTANTS_VERSION}"));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_space_is_read_from_df_and_anything_else_is_no_answer() {
        let df = "Filesystem     1024-blocks     Used Available Capacity Mounted on\n\
                  /dev/vda         264241152 95420416     291840     100% /\n";
        let gib = free_gib(df).unwrap();
        assert!((gib - 0.278).abs() < 0.001, "{gib}");
        assert_eq!(free_gib("df: /nowhere: No such file or directory\n"), None);
    }
}
