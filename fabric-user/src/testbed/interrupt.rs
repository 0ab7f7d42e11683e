//! Ctrl-C (or SIGTERM, SIGHUP) during a command that builds testbeds its user never names
//! (`fabric experiment`, `fabric rxe smoke`): their testbeds are removed before the process
//! dies. `fabric link flap` uses the same handler to leave its link up.
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

/// Runs `step` (an owned testbed's bring-up, one change of a flap) so that a stop signal's
/// cleanup waits for it to end.
pub fn guarded_step<T>(step: impl FnOnce() -> Result<T>) -> Result<T> {
    let _work = owned_work();
    step()
}

/// The signals that end a command its user stops: Ctrl-C, `kill` (or a supervisor's timeout)
/// and a closed terminal, each with the word the handler says.
const STOP_SIGNALS: [(i32, &str); 3] =
    [(libc::SIGINT, "interrupted"), (libc::SIGTERM, "terminated"), (libc::SIGHUP, "hung up")];

/// Whether `signal` is ignored: so a shell starts a background job (SIGINT) and `nohup` a
/// command (SIGHUP), which those signals must not stop.
fn ignored(signal: i32) -> bool {
    // SAFETY: a zeroed sigaction is a valid out-parameter; a null new action only reads the
    // current one.
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signal, std::ptr::null(), &mut current) == 0 && current.sa_sigaction == libc::SIG_IGN
    }
}

/// On Ctrl-C, SIGTERM or SIGHUP (each unless ignored), removes every owned testbed (saying so
/// on stderr), then dies of the signal, as an interrupted command does (so that a calling
/// shell's loop stops too). A second signal during the removal ends the process at once.
pub fn remove_owned_on_interrupt(down: fn(&str) -> Result<()>) -> Result<()> {
    on_stop_signal(move |why| {
        // Taken, not held: the list's lock is free during the teardowns.
        let prefixes = std::mem::take(&mut *owned());
        remove(why, &prefixes, down)
    })
}

/// On a stop signal (see [`remove_owned_on_interrupt`]): once no [`guarded_step`] is under way,
/// runs `cleanup` with the signal's word ("interrupted"), then dies of the signal. The steps
/// of the main thread wait meanwhile, until the process has died.
pub fn on_stop_signal(cleanup: impl Fn(&str) + Send + 'static) -> Result<()> {
    let wanted: Vec<i32> = STOP_SIGNALS.iter().map(|&(s, _)| s).filter(|&s| !ignored(s)).collect();
    let mut signals = signal_hook::iterator::Signals::new(&wanted).context("installing the signal handlers")?;
    std::thread::Builder::new()
        .name("stop-signal".into())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                stop(signal, &wanted, &cleanup);
            }
        })
        .context("starting the signal handler's thread")?;
    INSTALLED.store(true, Ordering::SeqCst);
    Ok(())
}

/// The handler's work for `signal`: cleans up, then dies of it. `handled` are the stop signals
/// it was installed for (the others stay ignored).
fn stop(signal: i32, handled: &[i32], cleanup: &impl Fn(&str)) -> ! {
    // SAFETY: setting dispositions to the default or to ignore is valid at any time. A second
    // Ctrl-C now ends the process at once (the user asks for it); a repeated SIGTERM or SIGHUP
    // (a closing terminal sends SIGHUP more than once) must not cut the cleanup short; and a
    // closed stderr (a pipe whose reader Ctrl-C also stopped) must not kill the process before
    // it has cleaned up.
    unsafe {
        for &s in handled {
            libc::signal(s, if s == libc::SIGINT { libc::SIG_DFL } else { libc::SIG_IGN });
        }
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    let why = STOP_SIGNALS.iter().find(|&&(s, _)| s == signal).map_or("stopped", |&(_, w)| w);
    let _work = wait_for_owned_work(why);
    // Whatever happens in the cleanup, the process still dies of the signal below.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cleanup(why)));
    // SAFETY: raising a signal whose disposition is the default ends the process.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
    std::process::exit(128 + signal);
}

/// The work lock, for the handler: a step under way is waited for. If it is an owned
/// testbed's bring-up, the user is told so (a second Ctrl-C now would leave those testbeds).
fn wait_for_owned_work(why: &str) -> MutexGuard<'static, ()> {
    match WORK.try_lock() {
        Ok(work) => work,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => {
            let prefixes = owned().join(", ");
            let _ = if prefixes.is_empty() {
                // A change of a testbed (a flap's step) may itself wait for another command's.
                writeln!(std::io::stderr(), "{why}: finishing the change under way first (Ctrl-C again stops at once)")
            } else {
                writeln!(
                    std::io::stderr(),
                    "{why}: waiting for testbed {prefixes} to finish coming up, then removing it (Ctrl-C again \
                     leaves it: fabric down --prefix PREFIX removes it later)"
                )
            };
            WORK.lock().unwrap_or_else(PoisonError::into_inner)
        }
    }
}

/// Tears down `prefixes`, saying so. The main thread still runs meanwhile (an experiment's step
/// may save its state after the first teardown), so each is torn down once more at the end:
/// `down` of a testbed already gone does nothing.
fn remove(why: &str, prefixes: &[String], down: fn(&str) -> Result<()>) {
    for prefix in prefixes {
        let _ = writeln!(std::io::stderr(), "{why}: removing testbed {prefix}");
        if let Err(e) = down(prefix) {
            let _ = writeln!(std::io::stderr(), "  not all of it: {e:#} (fabric down --prefix {prefix})");
        }
    }
    for prefix in prefixes {
        let _ = down(prefix);
    }
}

/// Returns once no stop signal's cleanup is under way (one under way never returns: the process dies
/// at its end). The command line calls it before exiting, so that a main thread that failed
/// because its testbed went away does not exit in the middle of the cleanup.
pub fn await_interrupt_cleanup() {
    drop(owned_work());
}
