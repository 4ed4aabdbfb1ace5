//! Building blocks of the trainlog benchmark binary (`src/main.rs`): synthetic metrics,
//! async HTTP drivers and measurement helpers.

pub mod bounds;
pub mod client;
pub mod console;
pub mod data;
pub mod jobs;
pub mod liveness;
pub mod measure;
pub mod on_postgres;
pub mod replicas;
pub mod report;
pub mod rules;
