//! How many GPUs a job holds on a node, and which ones the node collector watches: what the job
//! was given there (the launcher's allocation), not what one process's `CUDA_VISIBLE_DEVICES`
//! lets it see. With Slurm's per-task binding each task sees one GPU of the node's two or eight.

/// The GPUs for the node collector to watch: the job's GPUs on this node as Slurm allocated
/// them (`SLURM_JOB_GPUS`: their indices, whatever each task sees), else `visible` (the process's
/// `CUDA_VISIBLE_DEVICES`).
pub fn watched(env: impl Fn(&str) -> Option<String>, visible: Option<String>) -> Option<String> {
    env("SLURM_JOB_GPUS").map(|ids| ids.trim().to_owned()).filter(|ids| !ids.is_empty()).or(visible)
}

/// The GPUs a job holds on this node when each of its processes is bound to one GPU and the
/// launcher said nothing of GPUs: its local world size (torchrun's `LOCAL_WORLD_SIZE`), when this
/// process's `CUDA_VISIBLE_DEVICES` names exactly one GPU and the node runs more than one process.
pub fn one_gpu_per_process(local_world_size: Option<u32>, visible: Option<&str>) -> Option<u32> {
    let local = local_world_size.filter(|n| *n > 1)?;
    let ids: Vec<&str> = visible?.split(',').map(str::trim).filter(|id| !id.is_empty()).collect();
    (ids.len() == 1).then_some(local)
}

/// The node's GPUs as recorded: their count, a model name for each (for pricing), and where the
/// count came from, saying so when the sources disagree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeGpus {
    pub count: u32,
    pub names: Vec<String>,
    pub source: String,
}

/// Decides the node's GPUs from the launcher's allocation (`allocated`: the count and the
/// variable that said it) and the GPUs NVML showed the collector (`seen`, their models; `watched`
/// is what it was asked to watch). The allocation wins: the job pays for every GPU it holds.
pub fn node_gpus(allocated: Option<(u32, &str)>, seen: &[String], watched: Option<&str>) -> NodeGpus {
    let shown = seen.len() as u32;
    let what_nvml_saw = || match watched {
        Some(ids) if ids.chars().count() > 120 => {
            format!("NVML shows {shown} (watching {}…)", ids.chars().take(120).collect::<String>())
        }
        Some(ids) => format!("NVML shows {shown} (watching {ids})"),
        None => format!("NVML shows {shown}"),
    };
    match allocated {
        None => NodeGpus { count: shown, names: seen.to_vec(), source: what_nvml_saw() },
        Some((count, from)) if shown == 0 => {
            NodeGpus { count, names: Vec::new(), source: format!("{from}={count}; NVML shows none") }
        }
        Some((count, from)) if count == shown => {
            NodeGpus { count, names: seen.to_vec(), source: format!("{from}={count}, as NVML shows") }
        }
        Some((count, from)) => {
            // The same model as the GPUs seen (a node's GPUs are one model in practice).
            let mut names: Vec<String> = seen.iter().take(count as usize).cloned().collect();
            while names.len() < count as usize {
                names.push(seen[seen.len() - 1].clone());
            }
            NodeGpus { count, names, source: format!("{from}={count} used; {} disagrees", what_nvml_saw()) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h100(n: usize) -> Vec<String> {
        vec!["NVIDIA H100 80GB HBM3".to_owned(); n]
    }

    #[test]
    fn processes_bound_to_one_gpu_each_hold_as_many_as_the_node_runs() {
        assert_eq!(one_gpu_per_process(Some(8), Some("3")), Some(8));
        assert_eq!(one_gpu_per_process(Some(8), Some("0,1,2,3,4,5,6,7")), None, "it sees them all");
        assert_eq!(one_gpu_per_process(Some(1), Some("0")), None, "one process, one GPU");
        assert_eq!(one_gpu_per_process(Some(4), None), None);
        assert_eq!(one_gpu_per_process(Some(4), Some("")), None);
        let node = node_gpus(Some((8, "LOCAL_WORLD_SIZE")), &h100(1), Some("3"));
        assert_eq!(node.count, 8);
        assert_eq!(node.names, h100(8));
    }

    #[test]
    fn a_task_bound_to_one_gpu_of_two_records_the_two_its_job_holds() {
        let env = |name: &str| (name == "SLURM_JOB_GPUS").then(|| "0,1".to_owned());
        assert_eq!(watched(env, Some("0".into())).as_deref(), Some("0,1"), "the collector watches both");
        // Were the collector to see only the task's GPU, the allocation still counts two.
        let node = node_gpus(Some((2, "SLURM_GPUS_ON_NODE")), &h100(1), Some("0"));
        assert_eq!((node.count, node.names.clone()), (2, h100(2)));
        assert_eq!(node.source, "SLURM_GPUS_ON_NODE=2 used; NVML shows 1 (watching 0) disagrees");
    }

    #[test]
    fn agreeing_sources_and_a_single_source_say_so() {
        assert_eq!(
            node_gpus(Some((8, "SKYPILOT_NUM_GPUS_PER_NODE")), &h100(8), None).source,
            "SKYPILOT_NUM_GPUS_PER_NODE=8, as NVML shows"
        );
        let alone = node_gpus(None, &h100(4), Some("0,1,2,3"));
        assert_eq!((alone.count, alone.source.as_str()), (4, "NVML shows 4 (watching 0,1,2,3)"));
        let blind = node_gpus(Some((2, "SLURM_GPUS_ON_NODE")), &[], None);
        assert_eq!(
            (blind.count, blind.names.len(), blind.source.as_str()),
            (2, 0, "SLURM_GPUS_ON_NODE=2; NVML shows none")
        );
        assert_eq!(watched(|_| None, Some("3".into())).as_deref(), Some("3"), "without Slurm: what the process sees");
    }
}
