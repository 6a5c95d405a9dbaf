//! The `ankusa` command line. This is the binary's edge: errors from the
//! library are typed; here they become messages and exit codes.

mod run;
mod sink;
mod store;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "ankusa", version, about = "A webhook receiver whose delivery sinks are WebAssembly components.")]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the node.
    Run(run::RunArgs),
    /// Print the version.
    Version,
    /// Inspect and test sink components.
    Sink(sink::SinkArgs),
    /// Rebuild or recount a stopped node's store.
    Store(store::StoreArgs),
}

/// Entry point of the binary: parse, run, map errors to exit codes.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => run::run(args).await,
            Command::Version => {
                println!("ankusa {} (ankusa:sink@{})", env!("CARGO_PKG_VERSION"), crate::runtime::WIT_VERSION);
                Ok(ExitCode::SUCCESS)
            }
            Command::Sink(command) => sink::execute(command).await,
            Command::Store(command) => store::execute(command).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("ANKUSA_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only for a terminal, and never when NO_COLOR is set.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr()) && std::env::var_os("NO_COLOR").is_none();
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi).try_init();
}
