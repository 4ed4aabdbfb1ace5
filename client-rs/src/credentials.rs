//! `~/.trainlog/credentials` (or `$TRAINLOG_DIR/credentials`): the API key `trainlog login`
//! saved for each server, as a JSON object of server URL to key, readable by its owner only.

use crate::{Error, Result};
use std::collections::BTreeMap;
use std::path::PathBuf;

pub fn path() -> PathBuf {
    crate::local_dir().join("credentials")
}

/// The saved keys by server URL; none when the file is missing or unreadable.
pub fn load() -> BTreeMap<String, String> {
    std::fs::read(path()).ok().and_then(|bytes| serde_json::from_slice(&bytes).ok()).unwrap_or_default()
}

/// Saves `key` for `server`, replacing the file whole (mode 0600).
pub fn save(server: &str, key: &str) -> Result<PathBuf> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut all = load();
    all.insert(server.trim_end_matches('/').to_owned(), key.to_owned());
    let target = path();
    let dir = target.parent().map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    std::fs::create_dir_all(&dir).map_err(crate::io_err(format!("creating {}", dir.display())))?;
    let staged = dir.join(".credentials.tmp");
    let text = serde_json::to_vec_pretty(&all).map_err(|e| Error::Invalid(e.to_string()))?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&staged)
        .map_err(crate::io_err(format!("writing {}", staged.display())))?;
    file.write_all(&text)
        .and_then(|_| file.sync_all())
        .map_err(crate::io_err(format!("writing {}", staged.display())))?;
    std::fs::rename(&staged, &target).map_err(crate::io_err(format!("writing {}", target.display())))?;
    Ok(target)
}

/// Checks `key` against `server` with a read only a valid key may make, then saves it.
pub fn login(server: &str, key: &str) -> Result<PathBuf> {
    let http = crate::http::Http::with_key(server, std::time::Duration::from_secs(10), Some(key))?;
    http.get("/projects")?;
    save(server, key)
}
