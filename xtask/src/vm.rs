//! `cargo xtask vm [--kernel DEB] [-- COMMAND]`: boots a Debian 6.1 kernel (the oldest kernel
//! fabric supports) under qemu with virtme-ng, sharing this machine's root filesystem, and runs
//! COMMAND inside (default: `fabric check`, i.e. the XDP program passes that kernel's verifier).
//! Software emulation: ~15 s to boot here.
use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{Context as _, Result, bail};

use crate::util::{build_fabric, is_root, output, run as run_cmd, succeeds};

const VM_PACKAGES: &[&str] = &["qemu-system-x86", "busybox-static", "kmod"];
/// The Debian package whose dependency names the current 6.1 kernel image.
const KERNEL_META: &str = "linux-image-amd64";

fn cache() -> Result<PathBuf> {
    let home = std::env::var_os("HOME").context("HOME is not set")?;
    Ok(PathBuf::from(home).join(".cache/fabric"))
}

/// virtme-ng in a private virtualenv.
fn virtme(did: &mut Vec<String>) -> Result<PathBuf> {
    let venv = cache()?.join("vng");
    let vng = venv.join("bin/vng");
    if !succeeds(Command::new(&vng).arg("--version")) {
        run_cmd(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
        run_cmd(Command::new(venv.join("bin/pip")).args(["install", "-q", "virtme-ng"]))?;
        did.push("installed virtme-ng".into());
    }
    Ok(vng)
}

/// Downloads and unpacks a kernel package (cached); returns the vmlinuz path.
fn kernel(deb: Option<&str>, did: &mut Vec<String>) -> Result<PathBuf> {
    let package = match deb {
        Some(p) => p.to_string(),
        None => {
            let deps = output(Command::new("apt-cache").args(["depends", KERNEL_META]))
                .with_context(|| format!("apt-cache depends {KERNEL_META} (is this Debian?)"))?;
            deps.lines()
                .filter_map(|l| l.trim().strip_prefix("Depends: "))
                .find(|d| d.starts_with("linux-image-6.1"))
                .map(str::to_string)
                .with_context(|| format!("{KERNEL_META} does not depend on a 6.1 kernel here; pass --kernel PACKAGE"))?
        }
    };
    let version = package.trim_start_matches("linux-image-").to_string();
    let dir = cache()?.join("kernel").join(&package);
    let vmlinuz = dir.join("root/boot").join(format!("vmlinuz-{version}"));
    if vmlinuz.exists() {
        return Ok(vmlinuz);
    }
    std::fs::create_dir_all(&dir)?;
    run_cmd(Command::new("apt-get").current_dir(&dir).args(["download", "-q", &package]))?;
    let deb_file = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .context("apt-get download left no .deb")?;
    run_cmd(Command::new("dpkg").arg("-x").arg(&deb_file).arg(dir.join("root")))?;
    // The package ships no modules.dep.
    run_cmd(Command::new("depmod").arg("-b").arg(dir.join("root")).arg(&version))?;
    std::fs::remove_file(&deb_file)?;
    did.push(format!("unpacked {package}"));
    Ok(vmlinuz)
}

/// Boots the kernel, runs `command` (a shell line) and returns its exit status and output.
pub fn boot(vng: &Path, vmlinuz: &Path, command: &str) -> Result<(i32, String)> {
    const MARK: &str = "fabric-vm-exit=";
    let script = format!("{command}; echo {MARK}$?");
    // vng runs virtme-run from PATH: put the virtualenv's bin first.
    let bin = vng.parent().context("vng has a directory")?;
    let path = std::env::join_paths(
        std::iter::once(bin.to_path_buf()).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )?;
    let out = Command::new(vng)
        .env("PATH", path)
        .args(["--verbose", "--run"])
        .arg(vmlinuz)
        .args(["--disable-kvm", "--force-9p", "--cpus", "2", "--memory", "2G", "--exec", &script])
        .output()
        .context("running vng")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    // The console interleaves kernel messages; the guest's own lines are the ones without "[".
    let guest: Vec<&str> = text.lines().filter(|l| !l.starts_with('[')).collect();
    let code = guest
        .iter()
        .find_map(|l| l.strip_prefix(MARK))
        .and_then(|c| c.trim().parse().ok())
        .with_context(|| format!("the VM did not report an exit status; its output:\n{}", tail(&guest, 40)))?;
    Ok((code, tail(&guest, 60)))
}

fn tail(lines: &[&str], n: usize) -> String {
    lines[lines.len().saturating_sub(n)..].join("\n")
}

pub fn run(kernel_deb: Option<&str>, command: &[String]) -> Result<()> {
    if !is_root() {
        bail!("the VM needs root (packages, and the guest runs as root)");
    }
    let start = Instant::now();
    let mut did = Vec::new();
    crate::setup::apt_install(VM_PACKAGES, &mut did)?;
    let vng = virtme(&mut did)?;
    let vmlinuz = kernel(kernel_deb, &mut did)?;
    let fabric = build_fabric()?;
    let command = if command.is_empty() {
        format!("uname -r; {} check", fabric.display())
    } else {
        command.join(" ")
    };
    println!("vm: booting {} (software emulation) to run: {command}", vmlinuz.display());
    let (code, out) = boot(&vng, &vmlinuz, &command)?;
    println!("{out}");
    if !did.is_empty() {
        println!("vm: {}", did.join("; "));
    }
    println!("vm: exit status {code} ({:.1?})", start.elapsed());
    if code != 0 {
        bail!("the command failed inside the VM (exit status {code})");
    }
    Ok(())
}
