//! The media spool of a run: `{spool}/media/{run_id}/NNNNNNNNNNNN.json` holds encoded items not yet
//! recorded by the server, in order, and `blobs/{sha256}` the bytes they name. A blob is written
//! before the entry that names it, and an entry appears whole (written aside, then renamed).
//! Folders and files are the owner's alone, as in the request spool.

use super::encode::{Blob, Prepared, Route};
use crate::{io_err, Error, Result};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

pub struct MediaSpool {
    dir: PathBuf,
    next: u64,
}

/// An entry read back: the items, and the blobs they name with their media types; the
/// histograms; the table parts with the blob holding each one's body.
pub struct Entry {
    pub path: PathBuf,
    pub items: Vec<Value>,
    pub blobs: Vec<(String, String)>,
    pub histograms: Vec<Value>,
    pub tables: Vec<(Value, String, String)>,
}

impl Entry {
    /// Items, histograms and table parts together.
    pub fn len(&self) -> usize {
        self.items.len() + self.histograms.len() + self.tables.len()
    }
}

impl MediaSpool {
    pub fn open(spool_dir: &Path, run_id: &str) -> Self {
        let dir = spool_dir.join("media").join(run_id);
        let next = Self::entries_in(&dir).last().and_then(|p| entry_number(p)).map_or(0, |n| n + 1);
        Self { dir, next }
    }

    fn entries_in(dir: &Path) -> Vec<PathBuf> {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| entry_number(p).is_some())
            .collect();
        entries.sort();
        entries
    }

    /// The entries waiting, oldest first.
    pub fn entries(&self) -> Vec<PathBuf> {
        Self::entries_in(&self.dir)
    }

    /// Items waiting in the spool.
    pub fn items(&self) -> u64 {
        self.entries().iter().filter_map(|p| self.load(p).ok()).map(|e| e.len() as u64).sum()
    }

    /// Writes encoded items and their blobs to disk, to be sent later.
    pub fn save(&mut self, prepared: &[Prepared]) -> Result<()> {
        let blobs_dir = self.dir.join("blobs");
        for dir in [&self.dir, &blobs_dir] {
            crate::spool::private_dir(dir).map_err(io_err(format!("creating {}", dir.display())))?;
        }
        let (mut named, mut items, mut histograms, mut tables) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for p in prepared {
            for blob in &p.blobs {
                let path = blobs_dir.join(&blob.sha256);
                if !path.exists() {
                    write_whole(&path, &blob.bytes)?;
                }
                let entry = json!({"sha256": blob.sha256, "mime": blob.mime});
                match p.route {
                    Route::Table => tables.push(json!({"part": p.item, "body": entry})),
                    _ => named.push(entry),
                }
            }
            match p.route {
                Route::Media => items.push(&p.item),
                Route::Histogram => histograms.push(&p.item),
                Route::Table => {}
            }
        }
        let body = json!({"items": items, "blobs": named, "histograms": histograms, "tables": tables}).to_string();
        write_whole(&self.dir.join(format!("{:012}.json", self.next)), body.as_bytes())?;
        self.next += 1;
        Ok(())
    }

    pub fn load(&self, path: &Path) -> Result<Entry> {
        let text = std::fs::read_to_string(path).map_err(io_err(format!("reading {}", path.display())))?;
        let body: Value = serde_json::from_str(&text)
            .map_err(|e| Error::Invalid(format!("{} is not a media spool entry: {e}", path.display())))?;
        let items = body["items"].as_array().cloned().unwrap_or_default();
        let named = |b: &Value| Some((b["sha256"].as_str()?.to_owned(), b["mime"].as_str()?.to_owned()));
        let blobs = body["blobs"].as_array().into_iter().flatten().filter_map(named).collect();
        let histograms = body["histograms"].as_array().cloned().unwrap_or_default();
        let tables = body["tables"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| {
                let (sha, mime) = named(&t["body"])?;
                Some((t["part"].clone(), sha, mime))
            })
            .collect();
        Ok(Entry { path: path.to_owned(), items, blobs, histograms, tables })
    }

    pub fn blob(&self, sha: &str, mime: &str) -> Result<Blob> {
        let path = self.dir.join("blobs").join(sha);
        let bytes = std::fs::read(&path).map_err(io_err(format!("reading {}", path.display())))?;
        Ok(Blob { sha256: sha.to_owned(), mime: mime.to_owned(), bytes })
    }

    /// Forgets a sent entry; with none left, the blobs go too.
    pub fn remove(&self, entry: &Entry) -> Result<()> {
        std::fs::remove_file(&entry.path).map_err(io_err(format!("removing {}", entry.path.display())))?;
        if self.entries().is_empty() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.entries().is_empty()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

fn entry_number(path: &Path) -> Option<u64> {
    let name = path.file_name()?.to_str()?;
    name.strip_suffix(".json")?.parse().ok()
}

/// Writes a file beside its final name, syncs it and renames it in place.
fn write_whole(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let aside = path.with_extension("partial");
    let mut f = crate::spool::private_file(std::fs::OpenOptions::new().create(true).write(true).truncate(true))
        .open(&aside)
        .map_err(io_err(format!("creating {}", aside.display())))?;
    f.write_all(bytes).and_then(|()| f.sync_all()).map_err(io_err(format!("writing {}", aside.display())))?;
    std::fs::rename(&aside, path).map_err(io_err(format!("renaming {}", aside.display())))
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn media_spool_folders_and_files_are_the_owners_alone() {
        let root = tempfile::tempdir().unwrap();
        let mut spool = MediaSpool::open(root.path(), "r1");
        let blob = Blob { sha256: "ab".repeat(32), mime: "image/png".into(), bytes: vec![1, 2, 3] };
        let item = json!({"key": "images", "step": 0});
        spool.save(&[Prepared { route: Route::Media, item, blobs: vec![blob] }]).unwrap();
        let modes = crate::spool::modes_under(&root.path().join("media"));
        let names: Vec<String> =
            modes.iter().map(|(p, _)| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert!(names.iter().any(|n| n == &"ab".repeat(32)) && names.iter().any(|n| n.ends_with(".json")), "{names:?}");
        for (path, mode) in modes {
            let wanted = if path.is_dir() { 0o700 } else { 0o600 };
            assert_eq!(mode, wanted, "{} is {mode:o}", path.display());
        }
    }
}
