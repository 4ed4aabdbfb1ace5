//! Machine and process readings (CPU, RAM, network, this process's memory and CPU) for the
//! `sys/` keys.
//!
//! Each sample refreshes only what it reports: the CPU counters, the RAM figures and this one
//! process (never the whole process table).

use std::time::Instant;
use sysinfo::{
    CpuRefreshKind, MemoryRefreshKind, Networks, Pid, ProcessRefreshKind, ProcessesToUpdate, RefreshKind, System,
};

/// Samples CPU and memory use of the machine and of this process.
///
/// CPU figures are averages since the previous sample (the first one covers the time since
/// [`SystemSampler::new`]); `sys/proc.cpu_percent` is per core, as in `top`, so a process busy on
/// four cores reads 400.
pub struct SystemSampler {
    /// None where sysinfo cannot read this platform: samples are then empty.
    system: Option<System>,
    pid: Option<Pid>,
    /// The machine's network interfaces and when their counters were last read.
    networks: Option<Networks>,
    networks_read: Instant,
}

impl std::fmt::Debug for SystemSampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SystemSampler").field("pid", &self.pid).finish_non_exhaustive()
    }
}

impl Default for SystemSampler {
    fn default() -> Self {
        Self::new()
    }
}

fn process_refresh() -> ProcessRefreshKind {
    ProcessRefreshKind::nothing().with_memory().with_cpu()
}

impl SystemSampler {
    /// Takes the first CPU counters so that the first sample has a baseline.
    pub fn new() -> Self {
        let refresh = RefreshKind::nothing()
            .with_cpu(CpuRefreshKind::nothing().with_usage())
            .with_memory(MemoryRefreshKind::nothing().with_ram());
        let mut system = System::new_with_specifics(refresh).ok();
        let pid = sysinfo::get_current_pid().ok();
        if let (Some(system), Some(pid)) = (system.as_mut(), pid) {
            system.refresh_processes_specifics(ProcessesToUpdate::Some(&[pid]), true, process_refresh());
        }
        SystemSampler { system, pid, networks: Networks::new_with_refreshed_list().ok(), networks_read: Instant::now() }
    }

    /// `sys/cpu.percent` (whole machine, 0..100), `sys/ram.used_bytes`, `sys/ram.total_bytes`,
    /// `sys/net.recv_bytes_per_s` and `sys/net.sent_bytes_per_s` (every interface, loopback too,
    /// as psutil counts them, over the time since the previous sample), `sys/proc.rss_bytes` and
    /// `sys/proc.cpu_percent` (this process). Readings the platform does not give are left out.
    pub fn sample(&mut self) -> Vec<(String, f64)> {
        let Some(system) = self.system.as_mut() else {
            return Vec::new();
        };
        system.refresh_cpu_specifics(CpuRefreshKind::nothing().with_usage());
        system.refresh_memory_specifics(MemoryRefreshKind::nothing().with_ram());
        let mut out = Vec::with_capacity(5);
        if !system.cpus().is_empty() {
            let cpu = f64::from(system.global_cpu_usage());
            if cpu.is_finite() {
                out.push(("sys/cpu.percent".to_owned(), cpu.clamp(0.0, 100.0)));
            }
        }
        let total = system.total_memory();
        if total > 0 {
            out.push(("sys/ram.used_bytes".to_owned(), system.used_memory() as f64));
            out.push(("sys/ram.total_bytes".to_owned(), total as f64));
        }
        let seconds = self.networks_read.elapsed().as_secs_f64();
        self.networks_read = Instant::now();
        if let Some(networks) = self.networks.as_mut().filter(|_| seconds > 0.0) {
            networks.refresh(true);
            let (recv, sent) = networks
                .values()
                .fold((0u64, 0u64), |(r, s), n| (r.saturating_add(n.received()), s.saturating_add(n.transmitted())));
            out.push(("sys/net.recv_bytes_per_s".to_owned(), recv as f64 / seconds));
            out.push(("sys/net.sent_bytes_per_s".to_owned(), sent as f64 / seconds));
        }
        if let Some(pid) = self.pid {
            system.refresh_processes_specifics(ProcessesToUpdate::Some(&[pid]), true, process_refresh());
            if let Some(process) = system.process(pid) {
                out.push(("sys/proc.rss_bytes".to_owned(), process.memory() as f64));
                let cpu = f64::from(process.cpu_usage());
                if cpu.is_finite() {
                    out.push(("sys/proc.cpu_percent".to_owned(), cpu.max(0.0)));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(sample: &[(String, f64)], key: &str) -> f64 {
        sample.iter().find(|(k, _)| k == key).map(|(_, v)| *v).unwrap_or_else(|| panic!("no {key} in {sample:?}"))
    }

    #[test]
    fn sample_has_all_keys_with_sane_values() {
        let mut sampler = SystemSampler::new();
        // Some work so the process has used CPU time between the two readings.
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        // A mebibyte over loopback, so the network counters move.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let reader = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            std::io::copy(&mut conn, &mut std::io::sink()).unwrap()
        });
        std::io::Write::write_all(&mut std::net::TcpStream::connect(address).unwrap(), &vec![7u8; 1 << 20]).unwrap();
        assert_eq!(reader.join().unwrap(), 1 << 20);
        std::thread::sleep(sysinfo::MINIMUM_CPU_UPDATE_INTERVAL);
        let sample = sampler.sample();
        let mut keys: Vec<&str> = sample.iter().map(|(k, _)| k.as_str()).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "sys/cpu.percent",
                "sys/net.recv_bytes_per_s",
                "sys/net.sent_bytes_per_s",
                "sys/proc.cpu_percent",
                "sys/proc.rss_bytes",
                "sys/ram.total_bytes",
                "sys/ram.used_bytes"
            ]
        );
        let cpu = get(&sample, "sys/cpu.percent");
        assert!((0.0..=100.0).contains(&cpu), "{cpu}");
        let total = get(&sample, "sys/ram.total_bytes");
        let used = get(&sample, "sys/ram.used_bytes");
        assert!(total > used && used > 0.0, "total {total} used {used}");
        let rss = get(&sample, "sys/proc.rss_bytes");
        assert!(rss > 0.0 && rss < total, "rss {rss}");
        assert!(get(&sample, "sys/proc.cpu_percent") >= 0.0);
        assert!(get(&sample, "sys/net.recv_bytes_per_s") > 0.0, "the loopback mebibyte was received");
        assert!(get(&sample, "sys/net.sent_bytes_per_s") > 0.0, "and sent");
        // A second sample keeps working and keeps the same keys.
        assert_eq!(sampler.sample().len(), 7);
    }
}
