//! `cargo xtask vm [--kernel DEB] [-- COMMAND]`: boots a Debian 6.1 kernel (the oldest kernel
//! fabric supports) under qemu with virtme-ng, sharing this machine's root filesystem, and runs
//! COMMAND inside. Default: `fabric check` (the XDP program passes that kernel's verifier), then
//! `fabric rxe smoke` (soft-RoCE hosts through a 2-RTSW / 2-CTSW XDP fabric, `ib_write_bw -q 4`),
//! whose results come back through a shared directory (results/vm/). Bounded to 10 minutes.
//! Software emulation: ~15 s to boot here.
use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{Context as _, Result, bail};

use crate::util::{build_fabric, is_root, output, run as run_cmd, succeeds};

/// The guest runs this machine's userspace: the rxe tools are installed here (they install
/// without the kernel module) and used inside.
const VM_PACKAGES: &[&str] = &[
    "qemu-system-x86",
    "busybox-static",
    "kmod",
    "iproute2",
    "tcpdump",
    "rdma-core",
    "ibverbs-providers",
    "ibverbs-utils",
    "perftest",
    "libibverbs-dev",
    "gcc",
    // virtme-ng goes into a virtualenv (`python3 -m venv`), which Debian's python3 makes only
    // with this package.
    "python3-venv",
];
/// The whole VM run, boot included.
const VM_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);
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
    boot_with(vng, vmlinuz, command, None)
}

/// [`boot`], with `rwdir` shared writable with the guest (at the same path), killed after
/// [`VM_TIMEOUT`].
pub fn boot_with(vng: &Path, vmlinuz: &Path, command: &str, rwdir: Option<&Path>) -> Result<(i32, String)> {
    const MARK: &str = "fabric-vm-exit=";
    // The exit status also goes to the shared directory: on the console, kernel messages can
    // split the marker line.
    let status_file = rwdir.map(|d| d.join("exit-status"));
    let script = match &status_file {
        Some(f) => {
            let _ = std::fs::remove_file(f);
            format!("{command}; rc=$?; echo $rc > {}; echo {MARK}$rc", f.display())
        }
        None => format!("{command}; echo {MARK}$?"),
    };
    // vng runs virtme-run from PATH: put the virtualenv's bin first.
    let bin = vng.parent().context("vng has a directory")?;
    let path = std::env::join_paths(
        std::iter::once(bin.to_path_buf()).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )?;
    let log = std::env::temp_dir().join(format!("fabric-vm-{}.log", std::process::id()));
    let log_file = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    let mut vm = Command::new(vng);
    vm.env("PATH", path).args(["--verbose", "--run"]).arg(vmlinuz).args([
        "--disable-kvm",
        "--force-9p",
        "--cpus",
        "2",
        "--memory",
        "2G",
    ]);
    if let Some(dir) = rwdir {
        vm.arg("--rwdir").arg(dir);
    }
    // Its own process group, so that a timeout takes qemu down with vng.
    std::os::unix::process::CommandExt::process_group(&mut vm, 0);
    let mut child = vm
        .args(["--exec", &script])
        .stdin(std::process::Stdio::null())
        .stdout(log_file.try_clone()?)
        .stderr(log_file)
        .spawn()
        .context("running vng")?;
    let start = Instant::now();
    let timed_out = loop {
        if child.try_wait()?.is_some() {
            break false;
        }
        if start.elapsed() > VM_TIMEOUT {
            let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", child.id())]).status();
            let _ = child.kill();
            let _ = child.wait();
            break true;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    let text = String::from_utf8_lossy(&std::fs::read(&log)?).into_owned();
    let _ = std::fs::remove_file(&log);
    if timed_out {
        let lines: Vec<&str> = text.lines().collect();
        bail!("the VM did not finish within {VM_TIMEOUT:?}; its output:\n{}", tail(&lines, 40));
    }
    // The console interleaves kernel messages; the guest's own lines are the ones without "[".
    let guest: Vec<&str> = text.lines().filter(|l| !l.starts_with('[')).collect();
    let from_file = status_file.and_then(|f| std::fs::read_to_string(f).ok()).and_then(|c| c.trim().parse().ok());
    let code = from_file
        .or_else(|| guest.iter().find_map(|l| l.strip_prefix(MARK)).and_then(|c| c.trim().parse().ok()))
        .with_context(|| format!("the VM did not report an exit status; its output:\n{}", tail(&guest, 40)))?;
    Ok((code, tail(&guest, 60)))
}

/// Builds our verbs program (ring AllReduce over libibverbs) next to the `fabric` binary, where
/// `fabric rxe allreduce` looks for it.
pub fn build_verbs(fabric: &Path) -> Result<PathBuf> {
    let out = fabric.with_file_name("fabric-verbs-allreduce");
    let src = crate::util::workspace_root().join("fabric-user/verbs/ring_allreduce.c");
    run_cmd(Command::new("cc").args(["-O2", "-Wall", "-o"]).arg(&out).arg(&src).arg("-libverbs"))?;
    Ok(out)
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
    build_verbs(&fabric)?;
    // Results come back through a directory shared writable with the guest.
    let results = crate::util::workspace_root().join("results/vm");
    std::fs::create_dir_all(&results)?;
    let smoke = command.is_empty();
    let command = if smoke {
        let ws = crate::util::workspace_root();
        format!(
            "uname -r; {f} check && cd {ws} && {{ {f} rxe smoke --topology {topo} --out {out} > {out}/rxe-smoke.log 2>&1; \
             rc=$?; cat {out}/rxe-smoke.log; [ $rc -eq 0 ]; }}",
            f = fabric.display(),
            ws = ws.display(),
            topo = ws.join("testbed/rxe-smoke.toml").display(),
            out = results.display()
        )
    } else {
        // One argument is a shell line (`cargo xtask vm -- 'a; b'`); several keep their words
        // (`cargo xtask vm -- sh -c 'a; b'` runs `sh` with one script).
        if command.len() == 1 { command[0].clone() } else { shell_words::join(command) }
    };
    println!("vm: booting {} (software emulation) to run: {command}", vmlinuz.display());
    let booted = Instant::now();
    let (code, out) = boot_with(&vng, &vmlinuz, &command, Some(&results))?;
    let vm_time = booted.elapsed();
    println!("{out}");
    // The smoke test's own log, without the console's kernel messages in between (only after a
    // smoke test: another command's run would show an old one).
    if let Some(Ok(log)) = smoke.then(|| std::fs::read_to_string(results.join("rxe-smoke.log"))) {
        println!("vm: results/vm/rxe-smoke.log:\n{log}");
    }
    if !did.is_empty() {
        println!("vm: {}", did.join("; "));
    }
    println!(
        "vm: exit status {code} (the VM {:.1?}, all {:.1?}); results in {}",
        vm_time,
        start.elapsed(),
        results.display()
    );
    if code != 0 {
        bail!("the command failed inside the VM (exit status {code})");
    }
    Ok(())
}
