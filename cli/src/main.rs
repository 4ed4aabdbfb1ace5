//! The `trainlog` command.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    trainlog_cli::main_with_args(std::env::args().collect())
}
