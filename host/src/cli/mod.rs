//! The `ankusa` command line. This is the binary's edge: errors from the
//! library are typed; here they become messages and exit codes.

mod banner;
mod client;
mod config;
mod fleet;
mod hooks;
mod operate;
mod run;
mod sink;
mod sink_dev;
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
    /// Check a configuration, loading every sink it names; exit 78 listing
    /// every problem.
    CheckConfig(config::CheckArgs),
    /// Print the configuration in force, defaults filled in, secrets
    /// redacted.
    PrintConfig(config::PrintArgs),
    /// Print the version.
    Version {
        #[arg(long, help = client::JSON_HELP)]
        json: bool,
    },
    /// List the dead-letter queue of a running node.
    Dlq(operate::DlqArgs),
    /// Show a running node's stored hooks and their deliveries.
    Hooks(hooks::HooksArgs),
    /// Start and follow replay jobs on a running node.
    Replay(operate::ReplayArgs),
    /// A running node's tenants: usage and erase.
    Tenant(operate::TenantArgs),
    /// A running node's fleet (`wal.mode: fleet`): nodes, leases, takeovers.
    Fleet(fleet::FleetArgs),
    /// Inspect and test sink components.
    Sink(sink::SinkArgs),
    /// Inspect, rebuild or recount a stopped node's store.
    Store(store::StoreArgs),
}

/// Entry point of the binary: parse, run, map errors to exit codes.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // `run` sets logging up from its configuration.
    if !matches!(cli.command, Command::Run(_)) {
        crate::telemetry::logs::init(crate::config::LogFormat::Human, "info");
    }
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
            Command::CheckConfig(args) => config::check(args).await,
            Command::PrintConfig(args) => config::print(args),
            Command::Version { json } => {
                let (version, wit) = (env!("CARGO_PKG_VERSION"), crate::runtime::WIT_VERSION);
                if json {
                    println!("{}", serde_json::json!({"version": version, "wit": format!("ankusa:sink@{wit}")}));
                } else {
                    println!("ankusa {version} (ankusa:sink@{wit})");
                }
                Ok(ExitCode::SUCCESS)
            }
            Command::Dlq(args) => operate::dlq(args).await,
            Command::Hooks(args) => hooks::hooks(args).await,
            Command::Replay(args) => operate::replay(args).await,
            Command::Tenant(args) => operate::tenant(args).await,
            Command::Fleet(args) => fleet::fleet(args).await,
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

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::Cli;

    fn parses(args: &[&str]) -> bool {
        Cli::try_parse_from(std::iter::once("ankusa").chain(args.iter().copied())).is_ok()
    }

    fn help(path: &[&str]) -> String {
        let mut command = Cli::command();
        // Global options reach subcommands once the tree is built.
        command.build();
        let mut at = &mut command;
        for name in path {
            at = at.find_subcommand_mut(name).unwrap_or_else(|| panic!("no `{name}`"));
        }
        at.render_long_help().to_string()
    }

    #[test]
    fn the_admin_url_has_one_name_everywhere_and_the_old_one_still_works() {
        assert!(parses(&["sink", "dev", "--admin-url", "http://127.0.0.1:4002"]));
        assert!(parses(&["sink", "dev", "--node", "http://127.0.0.1:4002"]), "the older name is an alias");
        assert!(parses(&["dlq", "list", "--admin-url", "http://127.0.0.1:4002"]));
        assert!(parses(&["hooks", "show", "7", "--admin-url", "http://127.0.0.1:4002", "--json"]));
        for path in [&["dlq", "list"][..], &["sink", "dev"], &["replay", "start"], &["fleet"], &["hooks", "show"]] {
            let text = help(path);
            assert!(text.contains("Admin API:") && text.contains("--admin-url"), "{path:?}:\n{text}");
            assert!(!text.contains("--node"), "the alias is hidden: {path:?}");
        }
    }

    #[test]
    fn options_that_do_nothing_for_a_command_are_refused() {
        assert!(!parses(&["sink", "new", "orders", "--lang", "rust", "--cache-dir", "/tmp/x"]));
        assert!(!parses(&["sink", "wit", "/tmp/wit", "--cache-dir", "/tmp/x"]));
        assert!(!parses(&["sink", "dev", "--json"]), "sink dev prints no JSON");
        assert!(parses(&["sink", "test", "--cache-dir", "/tmp/x"]));
    }

    #[test]
    fn every_argument_of_every_command_is_described() {
        fn walk(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in command.get_arguments().filter(|a| !a.is_hide_set()) {
                let name = arg.get_id().as_str();
                if arg.get_help().is_none() && !["help", "version"].contains(&name) {
                    missing.push(format!("{path} {name}"));
                }
            }
            for sub in command.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut command = Cli::command();
        command.build();
        let mut missing = Vec::new();
        walk(&command, "ankusa", &mut missing);
        assert!(missing.is_empty(), "arguments without a description: {missing:?}");
    }

    #[test]
    fn json_is_described_once() {
        for path in [&["dlq", "list"][..], &["sink", "inspect"], &["sink", "test"], &["check-config"], &["version"]] {
            let text = help(path);
            assert!(text.contains(super::client::JSON_HELP), "{path:?}:\n{text}");
        }
    }
}
