//! Which NVML devices `CUDA_VISIBLE_DEVICES` leaves visible, in CUDA's order.
//!
//! Mapping of `CUDA_VISIBLE_DEVICES` entries to NVML devices:
//! - an index `i` is taken as the NVML index `i`. CUDA's default order (`CUDA_DEVICE_ORDER`
//!   unset, "FASTEST_FIRST") may differ from NVML's PCI bus order on machines with mixed GPU
//!   models; with `CUDA_DEVICE_ORDER=PCI_BUS_ID` the two agree. On machines with identical GPUs
//!   (the usual training box) both orders are the PCI bus order.
//! - a UUID (`GPU-…`), possibly abbreviated to a prefix, selects the NVML device whose UUID starts
//!   with it; a prefix matching several devices is invalid, as in CUDA.
//! - a MIG UUID (`MIG-…`, or the older `MIG-GPU-<uuid>/<gi>/<ci>` form) is mapped to its *parent*
//!   GPU: readings (utilization, memory, power, temperature) are those of the whole physical GPU,
//!   because NVML does not report utilization, power or temperature per MIG instance. Two MIG
//!   instances of one GPU therefore show the same readings under two indices.
//!
//! As in CUDA, the first entry that is malformed, out of range, unknown or repeated ends the list:
//! the entries before it stay visible, the rest are ignored.

use std::collections::HashSet;

use super::GpuBackend;

/// What `CUDA_VISIBLE_DEVICES` leaves visible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VisibleDevices {
    /// Variable unset: every GPU is visible.
    All,
    /// No GPU is visible: `""`, `"-1"`, `"none"`, or a first entry that is invalid.
    None,
    /// The listed devices, in the order CUDA numbers them (0, 1, …).
    List(Vec<DeviceRef>),
}

/// One entry of `CUDA_VISIBLE_DEVICES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceRef {
    /// A device index (taken as an NVML index, see the module documentation).
    Index(u32),
    /// A GPU or MIG UUID, or a prefix of one, including its `GPU-` / `MIG-` prefix.
    Uuid(String),
}

/// Parses the value of `CUDA_VISIBLE_DEVICES` (`None` when the variable is unset).
///
/// Entries are comma-separated and trimmed; parsing stops at the first entry that is neither an
/// unsigned integer nor a `GPU-…`/`MIG-…` UUID (CUDA ignores it and everything after it). An empty
/// resulting list is [`VisibleDevices::None`].
pub fn parse_visible_devices(value: Option<&str>) -> VisibleDevices {
    let Some(value) = value else {
        return VisibleDevices::All;
    };
    let mut list = Vec::new();
    for entry in value.split(',') {
        match parse_entry(entry.trim()) {
            Some(device) => list.push(device),
            None => break,
        }
    }
    if list.is_empty() {
        VisibleDevices::None
    } else {
        VisibleDevices::List(list)
    }
}

fn parse_entry(entry: &str) -> Option<DeviceRef> {
    if entry.is_empty() {
        return None;
    }
    if entry.bytes().all(|b| b.is_ascii_digit()) {
        return entry.parse::<u32>().ok().map(DeviceRef::Index);
    }
    let upper = entry.get(..4).map(str::to_ascii_uppercase);
    match upper.as_deref() {
        Some("GPU-") | Some("MIG-") if entry.len() > 4 => Some(DeviceRef::Uuid(entry.to_owned())),
        _ => None,
    }
}

/// Case-insensitive "starts with" for UUIDs (CUDA accepts abbreviated UUIDs).
pub(super) fn uuid_has_prefix(uuid: &str, prefix: &str) -> bool {
    uuid.as_bytes().get(..prefix.len()).is_some_and(|head| head.eq_ignore_ascii_case(prefix.as_bytes()))
}

/// One GPU visible to CUDA.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Visible {
    /// NVML index of the (parent) GPU.
    pub nvml_index: u32,
    /// The `CUDA_VISIBLE_DEVICES` entry for a MIG instance, so `describe_devices` can tell.
    pub mig: Option<String>,
}

/// Resolves what `CUDA_VISIBLE_DEVICES` leaves visible to NVML indices, in CUDA's order.
pub(super) fn resolve_visible(backend: &dyn GpuBackend, visible: &VisibleDevices, count: u32) -> Vec<Visible> {
    let entries = match visible {
        VisibleDevices::None => return Vec::new(),
        VisibleDevices::All => return (0..count).map(|nvml_index| Visible { nvml_index, mig: None }).collect(),
        VisibleDevices::List(entries) => entries,
    };
    // UUIDs are read once, lazily: only UUID entries need them.
    let mut uuids: Option<Vec<Option<String>>> = None;
    let mut seen: HashSet<String> = HashSet::new();
    let mut out = Vec::new();
    for entry in entries {
        let resolved = match entry {
            DeviceRef::Index(i) if *i < count => Some(Visible { nvml_index: *i, mig: None }),
            DeviceRef::Index(_) => None,
            DeviceRef::Uuid(prefix) if prefix.get(..4).is_some_and(|p| p.eq_ignore_ascii_case("MIG-")) => {
                resolve_mig(backend, prefix, count, &mut uuids)
            }
            DeviceRef::Uuid(prefix) => {
                let uuids = uuids.get_or_insert_with(|| read_uuids(backend, count));
                unique_uuid_match(uuids, prefix).map(|nvml_index| Visible { nvml_index, mig: None })
            }
        };
        let Some(resolved) = resolved else { break };
        // A repeated device ends the list, as in CUDA.
        let identity = match &resolved.mig {
            Some(mig) => format!("mig:{}", mig.to_ascii_lowercase()),
            None => format!("gpu:{}", resolved.nvml_index),
        };
        if !seen.insert(identity) {
            break;
        }
        out.push(resolved);
    }
    out
}

fn read_uuids(backend: &dyn GpuBackend, count: u32) -> Vec<Option<String>> {
    (0..count).map(|i| backend.device(i).ok().and_then(|d| d.uuid().ok())).collect()
}

/// The index of the only device whose UUID starts with `prefix` (None: no match or ambiguous).
fn unique_uuid_match(uuids: &[Option<String>], prefix: &str) -> Option<u32> {
    let mut matches = uuids
        .iter()
        .enumerate()
        .filter(|(_, uuid)| uuid.as_deref().is_some_and(|u| uuid_has_prefix(u, prefix)))
        .map(|(i, _)| i);
    let first = matches.next()?;
    if matches.next().is_some() {
        return None;
    }
    u32::try_from(first).ok()
}

fn resolve_mig(
    backend: &dyn GpuBackend,
    entry: &str,
    count: u32,
    uuids: &mut Option<Vec<Option<String>>>,
) -> Option<Visible> {
    // Pre-R470 form: MIG-GPU-<parent uuid>/<gpu instance>/<compute instance>.
    let rest = entry.get(4..).unwrap_or("");
    let nvml_index = if rest.get(..4).is_some_and(|p| p.eq_ignore_ascii_case("GPU-")) {
        let parent = rest.split('/').next().unwrap_or(rest);
        let uuids = uuids.get_or_insert_with(|| read_uuids(backend, count));
        unique_uuid_match(uuids, parent)?
    } else {
        backend.mig_parent_index(entry).ok().flatten().filter(|i| *i < count)?
    };
    Some(Visible { nvml_index, mig: Some(entry.to_owned()) })
}
