//! The environment a run starts in: OS, host, CPU, RAM, command line and GPUs.
//!
//! Captured once at run start. Every piece that cannot be read becomes `null`; nothing here
//! panics or fails the run. (The Python layer adds the Python version and packages itself.)

use serde_json::{json, Value};
use sysinfo::{CpuRefreshKind, MemoryRefreshKind, RefreshKind, System};

use super::{gpu, redact};

/// A JSON object: `os` {name, version, arch}, `kernel`, `hostname`,
/// `cpu` {model, logical_cores, physical_cores}, `ram_total_bytes`, `command_line` (this
/// process's arguments, secrets masked by [`redact::redact_command_line`]),
/// `command_line_redactions` (how many secrets were masked in it), `executable`, `cwd`,
/// `sdk_version`, `cuda_visible_devices` and `gpu` (see [`gpu::describe`]).
pub fn capture() -> Value {
    let system = System::new_with_specifics(
        RefreshKind::nothing().with_cpu(CpuRefreshKind::nothing()).with_memory(MemoryRefreshKind::nothing().with_ram()),
    )
    .ok();
    let cpus = system.as_ref().map(|s| s.cpus()).unwrap_or(&[]);
    let model = cpus.first().map(|cpu| cpu.brand().trim().to_owned()).filter(|brand| !brand.is_empty());
    let logical_cores =
        if cpus.is_empty() { std::thread::available_parallelism().ok().map(|n| n.get()) } else { Some(cpus.len()) };
    let ram_total = system.as_ref().map(System::total_memory).filter(|total| *total > 0);
    let arguments: Vec<String> = std::env::args_os().map(|arg| arg.to_string_lossy().into_owned()).collect();
    let (command_line, command_line_redactions) = redact::redact_command_line(&arguments);
    json!({
        "os": {
            "name": System::name().ok(),
            "version": System::os_version().ok(),
            "arch": std::env::consts::ARCH,
        },
        "kernel": System::kernel_version().ok(),
        "hostname": System::host_name().ok(),
        "cpu": {
            "model": model,
            "logical_cores": logical_cores,
            "physical_cores": System::physical_core_count().ok(),
        },
        "ram_total_bytes": ram_total,
        "command_line": command_line,
        "command_line_redactions": command_line_redactions,
        "executable": std::env::current_exe().ok().map(|p| p.to_string_lossy().into_owned()),
        "cwd": std::env::current_dir().ok().map(|p| p.to_string_lossy().into_owned()),
        "sdk_version": env!("CARGO_PKG_VERSION"),
        "cuda_visible_devices": std::env::var_os("CUDA_VISIBLE_DEVICES").map(|v| v.to_string_lossy().into_owned()),
        "gpu": gpu::describe(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_describes_this_machine_and_process() {
        let env = capture();
        let hostname = env["hostname"].as_str().unwrap_or_default();
        assert!(!hostname.is_empty(), "{env}");
        assert!(env["cpu"]["logical_cores"].as_u64().is_some_and(|n| n > 0), "{env}");
        assert!(env["ram_total_bytes"].as_u64().is_some_and(|n| n > 0), "{env}");
        let args = env["command_line"].as_array().cloned().unwrap_or_default();
        assert!(!args.is_empty(), "{env}");
        let first = std::env::args().next().unwrap_or_default();
        assert_eq!(args[0], first.as_str());
        assert!(env["command_line_redactions"].is_u64(), "{env}");
        assert!(env["executable"].as_str().is_some_and(|e| !e.is_empty()), "{env}");
        assert_eq!(env["cwd"], std::env::current_dir().unwrap().to_string_lossy().as_ref());
        assert_eq!(env["sdk_version"], env!("CARGO_PKG_VERSION"));
        assert!(env["os"]["name"].is_string(), "{env}");
        assert!(env["gpu"]["available"].is_boolean(), "{env}");
        assert!(env.get("cuda_visible_devices").is_some(), "{env}");
    }
}
