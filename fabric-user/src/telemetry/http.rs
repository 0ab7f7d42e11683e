//! The HTTP side of `fabric exporter` and `fabric ui`: where they may listen, and serving an
//! axum router on a small tokio runtime of its own. axum because it is the tokio project's own
//! HTTP framework (hyper underneath), on the tokio the endpoints already use: routing, HTTP/1.0
//! and 1.1 and keep-alive done right, for a handful of routes, without a second async runtime.
use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use anyhow::{Context as _, Result};
use axum::Router;

/// Why a server would not listen.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error(
        "refusing to listen on {0}: it is not a loopback address (127.0.0.1 or ::1), and the testbed's \
         counters are not for the network at large; pass --allow-remote to serve other machines"
    )]
    NotLoopback(SocketAddr),
    #[error(
        "cannot listen on {0}: the address is already in use (another `fabric ui` or exporter?); choose another port with --listen"
    )]
    InUse(SocketAddr),
    #[error("cannot listen on {addr}: {source}")]
    Io { addr: SocketAddr, source: std::io::Error },
}

/// For a server started before its testbed (a typo in `--prefix`, say): what it serves until
/// one is up. `None` when testbed `prefix` is up.
pub fn absent_testbed_note(prefix: &str) -> Option<String> {
    // Only an absent state: a corrupt or unreadable one is reported by each scrape as it is.
    (!crate::state::state_path(prefix).exists()).then(|| {
        format!(
            "note: no testbed with prefix {prefix:?} is up (yet); until `fabric up --prefix {prefix}` builds one, \
             this serves its absence (`fabric status --prefix {prefix}` shows what exists)"
        )
    })
}

/// Binds `addr`: a loopback address, or any address when `allow_remote` (with a warning).
pub fn bind(addr: SocketAddr, allow_remote: bool) -> Result<std::net::TcpListener, BindError> {
    if !addr.ip().is_loopback() {
        if !allow_remote {
            return Err(BindError::NotLoopback(addr));
        }
        eprintln!("warning: serving on {addr}: anyone who can reach this address sees the testbed's counters");
    }
    let listener = std::net::TcpListener::bind(addr).map_err(|e| match e.kind() {
        std::io::ErrorKind::AddrInUse => BindError::InUse(addr),
        _ => BindError::Io { addr, source: e },
    })?;
    // tokio takes over a non-blocking socket.
    listener.set_nonblocking(true).map_err(|e| BindError::Io { addr, source: e })?;
    Ok(listener)
}

/// Serves `app` on `listener` until the process is stopped, or until `max_requests` responses
/// have been sent (tests). Blocks the calling thread.
pub fn serve(listener: std::net::TcpListener, app: Router, max_requests: Option<u64>) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting tokio")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener).context("handing the socket to tokio")?;
        let done = Arc::new(tokio::sync::Notify::new());
        let served = Arc::new(AtomicU64::new(0));
        let app = {
            let done = done.clone();
            app.layer(axum::middleware::map_response(move |response: axum::response::Response| {
                let n = served.fetch_add(1, Ordering::Relaxed) + 1;
                if max_requests.is_some_and(|m| n >= m) {
                    done.notify_one();
                }
                async move { response }
            }))
        };
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { done.notified().await })
            .await
            .context("serving HTTP")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_started_before_its_testbed_says_so() {
        let note = absent_testbed_note("zq9").expect("no such testbed");
        assert!(note.contains("no testbed with prefix \"zq9\"") && note.contains("fabric up --prefix zq9"), "{note}");
    }

    #[test]
    fn refuses_other_hosts_unless_asked_and_says_why_a_port_is_taken() {
        let remote: SocketAddr = "198.18.0.1:9464".parse().unwrap();
        let e = bind(remote, false).unwrap_err();
        assert!(matches!(e, BindError::NotLoopback(_)) && e.to_string().contains("--allow-remote"), "{e}");
        let taken = bind("127.0.0.1:0".parse().unwrap(), false).unwrap();
        let e = bind(taken.local_addr().unwrap(), false).unwrap_err();
        assert!(matches!(e, BindError::InUse(_)) && e.to_string().contains("already in use"), "{e}");
    }
}
