//! Collectors: what the SDK records by itself about the machine, the code and the cost.
pub mod cost;
pub mod environment;
pub mod git;
pub mod gpu;
pub mod job;
pub mod mfu;
pub mod node_gpus;
pub mod redact;
pub mod system;
