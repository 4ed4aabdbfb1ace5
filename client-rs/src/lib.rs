//! placeholder
pub mod collect;
