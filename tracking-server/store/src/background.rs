//! A thread of low CPU priority for work nobody waits on, such as writing buffered console
//! lines to files: when the cores are busy, ingest goes first.

use crate::{Error, Result};
use std::sync::mpsc;
use std::sync::Mutex;
use tokio::sync::oneshot;

type Job = Box<dyn FnOnce() + Send>;

pub(crate) struct Background {
    tx: Mutex<mpsc::Sender<Job>>,
}

impl Background {
    /// Starts the thread; it ends once this is dropped.
    pub(crate) fn start(name: &str) -> Result<Self> {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                lower_priority();
                for job in rx {
                    // A job that panics answers nothing (its caller hears so); the next runs.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                }
            })
            .map_err(crate::io_err("starting a background thread"))?;
        Ok(Self { tx: Mutex::new(tx) })
    }

    /// Runs `f` on the thread and answers what it did.
    pub(crate) async fn run<T: Send + 'static>(&self, f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
        let (done, answer) = oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = done.send(f());
        });
        crate::lock(&self.tx).send(job).map_err(|_| Error::ShuttingDown)?;
        answer.await.map_err(|_| Error::Task("a background job panicked".into()))?
    }
}

/// Nice 10 for the calling thread alone (Linux gives each thread its own nice value).
fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: gettid and setpriority take no pointers and only change this thread's priority.
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 10);
    }
}
