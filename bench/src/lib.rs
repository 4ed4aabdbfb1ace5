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

/// Points the harness at the `trainlog` binary beside this one (target/<profile>/), unless
/// `TRAINLOG_BIN` names another: the harness looks beside a test executable (…/deps/). Call it
/// before any thread starts.
pub fn use_the_server_beside_this_binary() {
    if std::env::var_os("TRAINLOG_BIN").is_none() {
        let exe = std::env::current_exe().expect("this executable has a path");
        let beside = exe.parent().expect("target/<profile>").join("trainlog");
        assert!(beside.exists(), "{} is missing: run `cargo build --release --workspace` first", beside.display());
        std::env::set_var("TRAINLOG_BIN", beside);
    }
}
