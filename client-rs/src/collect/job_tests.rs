//! Detection from environments recorded as each launcher sets them (with unrelated variables).

use super::*;

fn from(vars: &[(&str, &str)]) -> JobContext {
    let mut all: Vec<(&str, &str)> =
        vec![("PATH", "/usr/bin:/bin"), ("HOME", "/home/ml"), ("CUDA_VISIBLE_DEVICES", "0,1,2,3"), ("LANG", "C.UTF-8")];
    all.extend_from_slice(vars);
    detect(&|name| all.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned()))
}

fn shape(j: &JobContext) -> (u32, u32, u32, u32, u32) {
    (j.rank, j.world_size, j.local_rank, j.node_rank, j.node_count)
}

const TORCHRUN_RANK_5: &[(&str, &str)] = &[
    ("RANK", "5"),
    ("LOCAL_RANK", "1"),
    ("WORLD_SIZE", "8"),
    ("LOCAL_WORLD_SIZE", "4"),
    ("GROUP_RANK", "1"),
    ("GROUP_WORLD_SIZE", "2"),
    ("ROLE_RANK", "5"),
    ("ROLE_WORLD_SIZE", "8"),
    ("ROLE_NAME", "default"),
    ("MASTER_ADDR", "10.0.0.1"),
    ("MASTER_PORT", "29500"),
    ("TORCHELASTIC_RUN_ID", "bert-42"),
    ("TORCHELASTIC_RESTART_COUNT", "2"),
    ("TORCHELASTIC_MAX_RESTARTS", "3"),
    ("TORCHELASTIC_USE_AGENT_STORE", "True"),
    ("OMP_NUM_THREADS", "1"),
];

#[test]
fn no_launcher_is_a_job_of_one() {
    assert_eq!(from(&[]), JobContext::single());
    assert_eq!(from(&[]).job_key(), None);
}

#[test]
fn torchrun() {
    let j = from(TORCHRUN_RANK_5);
    assert_eq!(shape(&j), (5, 8, 1, 1, 2));
    assert_eq!((j.launcher.as_str(), j.job_id.as_deref()), ("torchrun", Some("bert-42")));
    assert_eq!(j.local_world_size, Some(4));
    assert_eq!(j.restart.as_deref(), Some("torchelastic=2"));
    assert_eq!(j.detected_from["rank"], "RANK");
    assert_eq!(j.detected_from["job_id"], "TORCHELASTIC_RUN_ID");
    assert_eq!(j.job_key().as_deref(), Some("torchrun:bert-42"));
    assert!(j.warnings.is_empty(), "{:?}", j.warnings);
    assert!(!j.is_node_leader());
}

#[test]
fn torchrun_without_a_rendezvous_id_is_told_by_its_master_address_with_a_warning() {
    let mut vars: Vec<(&str, &str)> =
        TORCHRUN_RANK_5.iter().filter(|(k, _)| *k != "TORCHELASTIC_RUN_ID").copied().collect();
    vars.push(("TORCHELASTIC_RUN_ID", "none"));
    let j = from(&vars);
    assert_eq!(j.job_id.as_deref(), Some("10.0.0.1:29500"));
    assert!(j.warnings.iter().any(|w| w.contains("--rdzv-id")), "{:?}", j.warnings);
}

#[test]
fn slurm_tasks_of_srun() {
    let j = from(&[
        ("SLURM_JOB_ID", "1234"),
        ("SLURM_JOBID", "1234"),
        ("SLURM_JOB_NAME", "train"),
        ("SLURM_CLUSTER_NAME", "trainlog-test"),
        ("SLURM_PROCID", "6"),
        ("SLURM_LOCALID", "2"),
        ("SLURM_NTASKS", "8"),
        ("SLURM_NPROCS", "8"),
        ("SLURM_NODEID", "1"),
        ("SLURM_NNODES", "2"),
        ("SLURM_JOB_NUM_NODES", "2"),
        ("SLURM_TASKS_PER_NODE", "4(x2)"),
        ("SLURM_STEP_ID", "0"),
        ("SLURM_GPUS_ON_NODE", "4"),
        ("SLURM_NODELIST", "gpu[01-02]"),
        ("SLURM_SUBMIT_DIR", "/home/ml"),
    ]);
    assert_eq!(shape(&j), (6, 8, 2, 1, 2));
    assert_eq!((j.launcher.as_str(), j.job_id.as_deref()), ("slurm", Some("trainlog-test:1234")));
    assert_eq!(j.local_world_size, Some(4));
    assert_eq!(j.restart.as_deref(), Some("slurm=0"), "no SLURM_RESTART_COUNT on the first start");
    assert_eq!(j.cluster.as_deref(), Some("trainlog-test"));
    assert_eq!(j.gpus_per_node, Some(4));
}

#[test]
fn a_requeued_slurm_job_and_an_array_task() {
    let j = from(&[("SLURM_JOB_ID", "77"), ("SLURM_PROCID", "0"), ("SLURM_NTASKS", "1"), ("SLURM_RESTART_COUNT", "1")]);
    assert_eq!(j.restart.as_deref(), Some("slurm=1"));
    let array = from(&[
        ("SLURM_JOB_ID", "501"),
        ("SLURM_ARRAY_JOB_ID", "500"),
        ("SLURM_ARRAY_TASK_ID", "1"),
        ("SLURM_ARRAY_TASK_COUNT", "4"),
        ("SLURM_ARRAY_TASK_MIN", "0"),
        ("SLURM_ARRAY_TASK_MAX", "3"),
    ]);
    assert_eq!(array.job_id.as_deref(), Some("500_1"));
    assert_eq!(shape(&array), (0, 1, 0, 0, 1), "a batch script's own process, outside srun");
    assert_eq!(tasks_on_node("2,1", 1), Some(1));
    assert_eq!(tasks_on_node("4(x2),3", 2), Some(3));
    assert_eq!(tasks_on_node("4(x2)", 2), None);
}

#[test]
fn torchrun_inside_slurm_takes_slurms_job_and_both_restart_counts() {
    let mut vars = TORCHRUN_RANK_5.to_vec();
    vars.extend_from_slice(&[
        ("SLURM_JOB_ID", "99"),
        ("SLURM_NODEID", "1"),
        ("SLURM_NNODES", "2"),
        ("SLURM_RESTART_COUNT", "1"),
    ]);
    let j = from(&vars);
    assert_eq!((j.launcher.as_str(), j.job_id.as_deref()), ("slurm", Some("99")));
    assert_eq!(shape(&j), (5, 8, 1, 1, 2), "the ranks are torchrun's");
    assert_eq!(j.restart.as_deref(), Some("slurm=1,torchelastic=2"));
}

#[test]
fn open_mpi_and_pmi() {
    let j = from(&[
        ("OMPI_COMM_WORLD_RANK", "9"),
        ("OMPI_COMM_WORLD_SIZE", "16"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "8"),
        ("OMPI_COMM_WORLD_NODE_RANK", "1"),
        ("OMPI_UNIVERSE_SIZE", "16"),
        ("PMIX_NAMESPACE", "prterun-host-12345@1"),
        ("PMIX_RANK", "9"),
    ]);
    assert_eq!(shape(&j), (9, 16, 1, 1, 2));
    assert_eq!((j.launcher.as_str(), j.job_id.as_deref()), ("mpi", Some("prterun-host-12345@1")));
    let pmi = from(&[("PMI_RANK", "3"), ("PMI_SIZE", "4"), ("MPI_LOCALRANKID", "3"), ("MPI_LOCALNRANKS", "4")]);
    assert_eq!(shape(&pmi), (3, 4, 3, 0, 1));
    assert_eq!(pmi.launcher, "mpi");
}

#[test]
fn skypilot_with_torchrun_inside() {
    let mut vars = TORCHRUN_RANK_5.to_vec();
    vars.extend_from_slice(&[
        ("SKYPILOT_TASK_ID", "sky-managed-2026_11_24-10-00-00-000000_llm_7-0"),
        ("SKYPILOT_NODE_RANK", "1"),
        ("SKYPILOT_NODE_IPS", "10.0.0.1\n10.0.0.2"),
        ("SKYPILOT_NUM_NODES", "2"),
        ("SKYPILOT_NUM_GPUS_PER_NODE", "4"),
        (
            "SKYPILOT_CLUSTER_INFO",
            r#"{"cluster_name": "llm-7", "cloud": "AWS", "region": "us-east-1", "zone": "us-east-1a", "python_version": "3.10"}"#,
        ),
        ("SKYPILOT_SERVE_REPLICA_ID", ""),
    ]);
    let j = from(&vars);
    assert_eq!(
        (j.launcher.as_str(), j.job_id.as_deref()),
        ("skypilot", Some("sky-managed-2026_11_24-10-00-00-000000_llm_7-0"))
    );
    assert_eq!(shape(&j), (5, 8, 1, 1, 2));
    assert_eq!(
        (j.cloud.as_deref(), j.region.as_deref(), j.zone.as_deref()),
        (Some("aws"), Some("us-east-1"), Some("us-east-1a"))
    );
    assert_eq!((j.cluster.as_deref(), j.gpus_per_node), (Some("llm-7"), Some(4)));
    assert_eq!(j.detected_from["zone"], "SKYPILOT_CLUSTER_INFO");
}

#[test]
fn skypilot_alone_is_one_process_per_node() {
    let j = from(&[
        ("SKYPILOT_TASK_ID", "sky-2026_11_24-job_3"),
        ("SKYPILOT_NODE_RANK", "2"),
        ("SKYPILOT_NUM_NODES", "3"),
        ("SKYPILOT_CLUSTER_INFO", "not json"),
    ]);
    assert_eq!(shape(&j), (2, 3, 0, 2, 3));
    assert!(j.warnings.iter().any(|w| w.contains("SKYPILOT_CLUSTER_INFO")));
}

#[test]
fn kubernetes_pytorchjob_and_indexed_job() {
    let j = from(&[
        ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
        ("HOSTNAME", "bert-ft-worker-2"),
        ("PET_NNODES", "4"),
        ("PET_NPROC_PER_NODE", "8"),
        ("PET_NODE_RANK", "3"),
        ("PET_MASTER_ADDR", "bert-ft-master-0"),
        ("PET_MASTER_PORT", "23456"),
    ]);
    assert_eq!((j.launcher.as_str(), j.job_id.as_deref()), ("kubernetes", Some("bert-ft")));
    assert_eq!(shape(&j), (3, 4, 0, 3, 4));
    assert!(j.warnings.iter().any(|w| w.contains("guessed")));
    let indexed = from(&[
        ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
        ("HOSTNAME", "sweep-a-5-x7k2p"),
        ("JOB_COMPLETION_INDEX", "5"),
    ]);
    assert_eq!(indexed.job_id.as_deref(), Some("sweep-a"));
    assert_eq!(indexed.node_rank, 5);
}

#[test]
fn sagemaker() {
    let j = from(&[
        ("TRAINING_JOB_NAME", "llm-2026-11-24-10-00-00-123"),
        ("SM_CURRENT_HOST", "algo-2"),
        ("SM_HOSTS", r#"["algo-1","algo-2","algo-3"]"#),
        ("SM_NUM_GPUS", "8"),
        ("SM_CURRENT_INSTANCE_TYPE", "ml.p4d.24xlarge"),
        ("AWS_REGION", "us-west-2"),
        ("SM_CHANNEL_TRAINING", "/opt/ml/input/data/training"),
    ]);
    assert_eq!((j.launcher.as_str(), j.job_id.as_deref()), ("sagemaker", Some("llm-2026-11-24-10-00-00-123")));
    assert_eq!(shape(&j), (1, 3, 0, 1, 3));
    assert_eq!((j.cloud.as_deref(), j.region.as_deref()), (Some("aws"), Some("us-west-2")));
    assert_eq!((j.instance_type.as_deref(), j.gpus_per_node), (Some("ml.p4d.24xlarge"), Some(8)));
}

#[test]
fn vertex_ai() {
    let spec = r#"{"cluster": {"workerpool0": ["cmle-training-workerpool0-ab-0:2222"], "workerpool1": ["cmle-training-workerpool1-ab-0:2222", "cmle-training-workerpool1-ab-1:2222"]}, "environment": "cloud", "task": {"type": "workerpool1", "index": 1}, "job": "{}"}"#;
    let j = from(&[("CLOUD_ML_JOB_ID", "1234567890"), ("CLUSTER_SPEC", spec), ("CLOUD_ML_REGION", "us-central1")]);
    assert_eq!((j.launcher.as_str(), j.job_id.as_deref()), ("vertex", Some("1234567890")));
    assert_eq!(shape(&j), (2, 3, 0, 2, 3));
    assert_eq!((j.cloud.as_deref(), j.region.as_deref()), (Some("gcp"), Some("us-central1")));
}

#[test]
fn trainlog_variables_win() {
    let mut vars = TORCHRUN_RANK_5.to_vec();
    vars.extend_from_slice(&[
        ("TRAINLOG_JOB_ID", "my-job"),
        ("TRAINLOG_RANK", "0"),
        ("TRAINLOG_CLOUD_PROVIDER", "GCP"),
        ("TRAINLOG_ZONE", "europe-west4-a"),
        ("TRAINLOG_SPOT", "yes"),
        ("TRAINLOG_GPUS_PER_NODE", "8"),
    ]);
    let j = from(&vars);
    assert_eq!(j.job_id.as_deref(), Some("my-job"));
    assert_eq!(j.rank, 0);
    assert_eq!(
        (j.cloud.as_deref(), j.zone.as_deref(), j.spot, j.gpus_per_node),
        (Some("gcp"), Some("europe-west4-a"), Some(true), Some(8))
    );
    assert_eq!(j.detected_from["rank"], "TRAINLOG_RANK");
    let only = from(&[("TRAINLOG_JOB_ID", "j"), ("TRAINLOG_RANK", "1"), ("TRAINLOG_WORLD_SIZE", "2")]);
    assert_eq!((only.launcher.as_str(), shape(&only)), ("trainlog", (1, 2, 0, 0, 1)));
}

#[test]
fn garbage_is_skipped_with_a_warning_and_the_result_stays_consistent() {
    let j = from(&[("RANK", "abc"), ("WORLD_SIZE", "4")]);
    assert_eq!(shape(&j), (0, 1, 0, 0, 1));
    assert!(j.warnings.iter().any(|w| w.contains("RANK")));
    let j = from(&[
        ("RANK", "7"),
        ("WORLD_SIZE", "4"),
        ("LOCAL_RANK", "9"),
        ("LOCAL_WORLD_SIZE", "4"),
        ("GROUP_RANK", "3"),
    ]);
    assert!(j.rank < j.world_size && j.node_rank < j.node_count, "{j:?}");
    assert_eq!(j.local_world_size, None);
    assert!(j.warnings.len() >= 2, "{:?}", j.warnings);
    let j = from(&[("SM_CURRENT_HOST", "algo-1"), ("SM_HOSTS", "algo-1")]);
    assert_eq!(shape(&j), (0, 1, 0, 0, 1));
    assert!(j.warnings.iter().any(|w| w.contains("SM_HOSTS")));
}
