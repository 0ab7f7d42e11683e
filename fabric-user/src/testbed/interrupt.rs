//! Ctrl-C during a command that builds testbeds its user never names (`fabric experiment`,
//! `fabric rxe smoke`): their testbeds are removed before the process dies.
//!
//! A signal ends the process without running drops, so the testbeds of `DownOnDrop::owned` are
//! listed here, and a handler thread removes them (with the teardown it is given: this module
//! sits below the testbed's own code).
//!
//! The handler never works beside the main thread's own bring-up or teardown of an owned
//! testbed: both hold [`owned_work`], the handler from the signal until the process dies, so a
//! half-built testbed is finished before it is removed, and the main thread never tears down
//! one the handler is removing. The main thread's other work goes on meanwhile (its steps fail
//! as their testbed goes), which is why the handler removes each testbed a second time at the
//! end.
use std::io::Write as _;
use std::sync::{
    Mutex, MutexGuard, PoisonError,
    atomic::{AtomicBool, Ordering},
};

use anyhow::{Context as _, Result};

/// The owned testbeds not yet torn down.
static OWNED: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// Held while an owned testbed is brought up or torn down, and by the handler.
static WORK: Mutex<()> = Mutex::new(());
/// Whether this process installed the handler (without one, no lock is needed).
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// A poisoned list or lock is as valid as before the panic: take it anyway.
fn owned() -> MutexGuard<'static, Vec<String>> {
    OWNED.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(super) fn own(prefix: &str) {
    owned().push(prefix.to_string());
}

pub(super) fn disown(prefix: &str) {
    owned().retain(|p| p != prefix);
}

/// The lock of owned bring-ups and teardowns, where the handler is installed.
pub(super) fn owned_work() -> Option<MutexGuard<'static, ()>> {
    INSTALLED.load(Ordering::SeqCst).then(|| WORK.lock().unwrap_or_else(PoisonError::into_inner))
}

/// Runs `bring_up` (of an owned testbed) so that Ctrl-C waits for it before removing it.
pub fn bringing_up<T>(bring_up: impl FnOnce() -> Result<T>) -> Result<T> {
    let _work = owned_work();
    bring_up()
}

/// Whether SIGINT is ignored: so a shell starts a background job, which Ctrl-C must not stop.
fn sigint_ignored() -> bool {
    // SAFETY: a zeroed sigaction is a valid out-parameter; a null new action only reads the
    // current one.
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGINT, std::ptr::null(), &mut current) == 0 && current.sa_sigaction == libc::SIG_IGN
    }
}

/// On Ctrl-C, removes every owned testbed (saying so on stderr), then dies of the signal, as an
/// interrupted command does (so that a calling shell's loop stops too). A second Ctrl-C during
/// the removal ends the process at once. Nothing is installed where SIGINT is ignored.
pub fn remove_owned_on_interrupt(down: fn(&str) -> Result<()>) -> Result<()> {
    if sigint_ignored() {
        return Ok(());
    }
    ctrlc::set_handler(move || {
        // SAFETY: setting dispositions to the default or to ignore is async-signal-safe and
        // valid at any time; a closed stderr (a pipe whose reader Ctrl-C also stopped) must not
        // kill the process before it has cleaned up.
        unsafe {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        }
        let _work = wait_for_owned_work();
        let prefixes = std::mem::take(&mut *owned());
        // Whatever happens in a teardown, the process still dies of the signal below.
        let _ = std::panic::catch_unwind(|| remove(&prefixes, down));
        // SAFETY: raising a signal whose disposition is the default ends the process.
        unsafe { libc::raise(libc::SIGINT) };
        std::process::exit(130);
    })
    .context("installing the Ctrl-C handler")?;
    INSTALLED.store(true, Ordering::SeqCst);
    Ok(())
}

/// The work lock, for the handler: a bring-up under way is waited for, and the user is told
/// so (a second Ctrl-C now would leave those testbeds).
fn wait_for_owned_work() -> MutexGuard<'static, ()> {
    match WORK.try_lock() {
        Ok(work) => work,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => {
            let prefixes = owned().join(", ");
            let _ = writeln!(
                std::io::stderr(),
                "interrupted: waiting for testbed {prefixes} to finish coming up, then removing it (Ctrl-C again \
                 leaves it: fabric down --prefix PREFIX removes it later)"
            );
            WORK.lock().unwrap_or_else(PoisonError::into_inner)
        }
    }
}

/// Tears down `prefixes`, saying so. The main thread still runs meanwhile (an experiment's step
/// may save its state after the first teardown), so each is torn down once more at the end:
/// `down` of a testbed already gone does nothing.
fn remove(prefixes: &[String], down: fn(&str) -> Result<()>) {
    for prefix in prefixes {
        let _ = writeln!(std::io::stderr(), "interrupted: removing testbed {prefix}");
        if let Err(e) = down(prefix) {
            let _ = writeln!(std::io::stderr(), "  not all of it: {e:#} (fabric down --prefix {prefix})");
        }
    }
    for prefix in prefixes {
        let _ = down(prefix);
    }
}

/// Returns once no Ctrl-C cleanup is under way (one under way never returns: the process dies
/// at its end). The command line calls it before exiting, so that a main thread that failed
/// because its testbed went away does not exit in the middle of the cleanup.
pub fn await_interrupt_cleanup() {
    drop(owned_work());
}
