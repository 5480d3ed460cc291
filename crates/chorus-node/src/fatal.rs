//! Fail-stop (issue 14 item 1): a replica whose core, execution or pillar
//! thread died must not live on as a zombie that answers `status` and
//! `/metrics` but never executes again; that silently costs the cluster one
//! fault of its f. Every such thread runs under [`spawn`]: an error it
//! returns, a panic, or an unexpected return is logged and handed to the
//! main thread, which stops the process with a non-zero exit code
//! ([`EXIT_CODE`]) so a supervisor can restart it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use tokio::sync::{mpsc, watch};

/// Exit code of a replica stopped by a fatal error (0: clean stop on
/// SIGTERM/SIGINT; 1: failed to start).
pub const EXIT_CODE: i32 = 5;

/// Why the replica stopped: the thread and its cause.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("fatal error in thread {thread}: {cause}")]
pub struct FatalError {
    pub thread: String,
    pub cause: String,
}

/// Where threads report their death; the main thread holds the receiver.
#[derive(Clone, Debug)]
pub struct FatalTx(mpsc::UnboundedSender<FatalError>);

pub fn channel() -> (FatalTx, mpsc::UnboundedReceiver<FatalError>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (FatalTx(tx), rx)
}

impl FatalTx {
    pub fn report(&self, thread: &str, cause: String) {
        tracing::error!(thread, %cause, "fatal error; the replica stops");
        // The main thread may be gone already (shutting down): nothing to tell.
        let _ = self.0.send(FatalError {
            thread: thread.to_string(),
            cause,
        });
    }
}

/// Spawn a thread whose end is fatal unless `stopping` is set: returning an
/// error or panicking always is, returning `Ok` only outside a shutdown.
pub fn spawn<F>(
    name: &str,
    fatal: FatalTx,
    stopping: watch::Receiver<bool>,
    body: F,
) -> std::io::Result<std::thread::JoinHandle<()>>
where
    F: FnOnce() -> anyhow::Result<()> + Send + 'static,
{
    let thread = name.to_string();
    std::thread::Builder::new().name(thread.clone()).spawn(move || {
        let cause = match catch_unwind(AssertUnwindSafe(body)) {
            Ok(Ok(())) if *stopping.borrow() => return,
            Ok(Ok(())) => "stopped unexpectedly".to_string(),
            Ok(Err(e)) => format!("{e:#}"),
            Err(panic) => format!("panicked: {}", panic_message(panic.as_ref())),
        };
        fatal.report(&thread, cause);
    })
}

pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn outcome(
        stopping: bool,
        body: impl FnOnce() -> anyhow::Result<()> + Send + 'static,
    ) -> Option<FatalError> {
        let (tx, mut rx) = channel();
        let (_stop_tx, stop_rx) = watch::channel(stopping);
        spawn("t", tx, stop_rx, body).unwrap().join().unwrap();
        std::thread::sleep(Duration::from_millis(1));
        rx.try_recv().ok()
    }

    #[test]
    fn errors_panics_and_unexpected_returns_are_fatal() {
        let e = outcome(false, || anyhow::bail!("disk full")).unwrap();
        assert_eq!(e.cause, "disk full");
        let e = outcome(false, || panic!("boom")).unwrap();
        assert_eq!(e.cause, "panicked: boom");
        let e = outcome(false, || Ok(())).unwrap();
        assert_eq!(e.cause, "stopped unexpectedly");
        assert_eq!(e.thread, "t");
    }

    #[test]
    fn a_clean_return_during_shutdown_is_not() {
        assert_eq!(outcome(true, || Ok(())), None);
        assert!(outcome(true, || anyhow::bail!("final sync failed")).is_some());
    }
}
