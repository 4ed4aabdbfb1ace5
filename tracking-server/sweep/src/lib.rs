//! Hyperparameter sweeps: the search space, search strategies and early-termination rules.
//! Everything here is a pure, deterministic function of (configuration, history, seed): no IO,
//! no clock, no global randomness. The server holds a sweep's state and calls these.

pub mod config;
pub mod early;
pub mod grid;
pub mod random;
pub mod rng;
pub mod space;
pub mod tpe;

use thiserror::Error;

#[derive(Debug, Error, PartialEq)]
pub enum Error {
    /// A configuration that cannot be searched, with the field it is about.
    #[error("{field}: {reason}")]
    Invalid { field: String, reason: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
