//! Measurement helpers: percentiles, process memory and CPU time from /proc, and sizes of the
//! Parquet files a server keeps under its data folder.

use std::path::Path;

/// Nearest-rank percentile (`p` in 0..=100) of unsorted samples; NaN when empty.
pub fn percentile(samples: &[f64], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    v[rank.min(v.len()) - 1]
}

/// Median: the mean of the middle two for an even count.
pub fn median(samples: &[f64]) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// A `/proc/PID/status` field in kB (e.g. `VmRSS`, `VmHWM`).
pub fn status_kb(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = text.lines().find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))?;
    line[field.len() + 1..].split_whitespace().next()?.parse().ok()
}

/// Resident memory of a process in MiB.
pub fn rss_mib(pid: u32) -> f64 {
    status_kb(pid, "VmRSS").expect("the server's /proc status has VmRSS") as f64 / 1024.0
}

/// Peak resident memory of a process in MiB.
pub fn hwm_mib(pid: u32) -> f64 {
    status_kb(pid, "VmHWM").expect("the server's /proc status has VmHWM") as f64 / 1024.0
}

/// User plus system CPU seconds a process has used (all its threads).
pub fn cpu_seconds(pid: &str) -> f64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat is readable");
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = &text[text.rfind(')').expect("a command name in /proc/PID/stat") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().expect("utime") + f[12].parse::<f64>().expect("stime");
    ticks / clock_ticks()
}

fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// Count and total bytes of the `*.parquet` files under `DATA/store/projects/*/metrics/`.
pub fn metric_parquet(data: &Path) -> (u64, u64) {
    let mut files = 0;
    let mut bytes = 0;
    let projects = data.join("store").join("projects");
    let Ok(entries) = std::fs::read_dir(&projects) else { return (0, 0) };
    for project in entries.flatten() {
        walk(&project.path().join("metrics"), &mut |p, len| {
            if p.extension().is_some_and(|e| e == "parquet") {
                files += 1;
                bytes += len;
            }
        });
    }
    (files, bytes)
}

/// Count and total bytes of one run's `*.parquet` files.
pub fn run_parquet(data: &Path, run: &str) -> (u64, u64) {
    let mut files = 0;
    let mut bytes = 0;
    let Ok(entries) = std::fs::read_dir(data.join("store").join("projects")) else { return (0, 0) };
    for project in entries.flatten() {
        walk(&project.path().join("metrics").join(run), &mut |p, len| {
            if p.extension().is_some_and(|e| e == "parquet") {
                files += 1;
                bytes += len;
            }
        });
    }
    (files, bytes)
}

fn walk(dir: &Path, f: &mut dyn FnMut(&Path, u64)) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let Ok(meta) = e.metadata() else { continue };
        if meta.is_dir() {
            walk(&e.path(), f);
        } else {
            f(&e.path(), meta.len());
        }
    }
}

/// Total bytes of every file under a folder.
pub fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    walk(dir, &mut |_, len| total += len);
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 5.0);
        assert_eq!(percentile(&v, 90.0), 9.0);
        assert_eq!(median(&v), 5.5);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
    }
}
