//! One server per data folder: an exclusive lock on `server.lock` in it, held while the server
//! runs and released by the kernel when its process ends however it ends, so a second server on
//! the same folder (whose shutdown would persist and remove the first one's write-ahead log)
//! refuses to start and names the first.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::Path;

/// The lock, held until dropped (or the process ends).
pub struct DataLock {
    file: File,
}

impl DataLock {
    /// Takes the folder's lock, or says which server holds it.
    pub fn take(data_dir: &Path) -> Result<Self, String> {
        let path = data_dir.join("server.lock");
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| format!("opening {}: {e}", path.display()))?;
        // SAFETY: flock on a descriptor this function owns; it only reads its arguments.
        let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
        if !locked {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            let who = if holder.is_empty() { "another trainlog server".to_owned() } else { holder.to_owned() };
            return Err(format!(
                "the data folder {} is in use by {who}; stop that server, or give this one a --data folder of its own",
                data_dir.display()
            ));
        }
        let mut lock = Self { file };
        lock.say(&format!("trainlog server pid {}", std::process::id()))?;
        Ok(lock)
    }

    /// Records who holds the lock (the pid and, once listening, the address), for the message a
    /// second server prints.
    pub fn say(&mut self, holder: &str) -> Result<(), String> {
        let write = |file: &mut File| -> std::io::Result<()> {
            file.set_len(0)?;
            file.seek(SeekFrom::Start(0))?;
            file.write_all(format!("{holder}\n").as_bytes())?;
            file.sync_data()
        };
        write(&mut self.file).map_err(|e| format!("writing the data folder's lock file: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_one_folder_is_refused_with_the_holder_named_until_the_first_goes() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = DataLock::take(dir.path()).unwrap();
        first.say("trainlog server pid 42 at http://127.0.0.1:7310").unwrap();
        let refused = DataLock::take(dir.path()).err().unwrap();
        assert!(refused.contains("in use by trainlog server pid 42 at http://127.0.0.1:7310"), "{refused}");
        drop(first);
        assert!(DataLock::take(dir.path()).is_ok());
    }
}
