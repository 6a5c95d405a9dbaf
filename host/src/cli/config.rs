//! `--config`, and the commands about the configuration itself:
//! `check-config` and `print-config`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::config::{Config, ConfigError, Problem};
use crate::runtime::Runtime;

/// The exit status of a configuration that cannot run (sysexits'
/// `EX_CONFIG`).
pub const EXIT_CONFIG: u8 = 78;

/// The file read when no `--config` is given, if it is in the working
/// directory.
const DEFAULT_FILE: &str = "ankusa.yml";

#[derive(Debug, Args)]
pub struct ConfigArgs {
    /// The configuration file. Without one, `./ankusa.yml` if there is
    /// one, else the embedded demo (a `demo` source delivering to the `log`
    /// sink, data in ./data).
    #[arg(long, short = 'c', env = "ANKUSA_CONFIG")]
    pub config: Option<PathBuf>,
}

impl ConfigArgs {
    /// The file to read: the one named, or `./ankusa.yml` when present.
    fn file(&self) -> Option<PathBuf> {
        self.config.clone().or_else(|| {
            let found = PathBuf::from(DEFAULT_FILE);
            found.is_file().then_some(found)
        })
    }

    /// The file's configuration, or the default, with `${VAR}` and
    /// `ANKUSA_*__*` taken from this process's environment.
    pub fn load(&self) -> Result<Config, ConfigError> {
        let env = environment();
        match self.file() {
            Some(path) => crate::config::load(&path, &env),
            None => crate::config::load_default(&env),
        }
    }

    /// What the configuration was read from, as the banner and messages
    /// name it.
    pub fn origin(&self) -> String {
        match (&self.config, self.file()) {
            (Some(path), _) => path.display().to_string(),
            (None, Some(found)) => format!("{} (found in the working directory)", found.display()),
            (None, None) => "the embedded demo configuration (no --config, no ./ankusa.yml)".into(),
        }
    }
}

/// The environment as text (variables that are not UTF-8 cannot be
/// referenced and are left out).
pub fn environment() -> BTreeMap<String, String> {
    std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))).collect()
}

/// Print a configuration's problems and give the exit status for them.
pub fn refuse(origin: &str, problems: &[Problem], json: bool) -> ExitCode {
    if json {
        let problems: Vec<_> =
            problems.iter().map(|p| serde_json::json!({"key": p.key, "message": p.message})).collect();
        println!("{}", serde_json::json!({"ok": false, "config": origin, "problems": problems}));
    } else {
        eprintln!("error: {origin}: {} problem(s)", problems.len());
        for problem in problems {
            eprintln!("  - {problem}");
        }
    }
    ExitCode::from(EXIT_CONFIG)
}

/// [`refuse`] for a configuration that did not load.
pub fn refuse_error(args: &ConfigArgs, error: &ConfigError, json: bool) -> ExitCode {
    match error {
        ConfigError::Invalid { problems, .. } => refuse(&args.origin(), problems, json),
        ConfigError::Read { .. } => refuse(&args.origin(), &[Problem::new("", error.to_string())], json),
    }
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// One JSON object on stdout instead of text.
    #[arg(long)]
    json: bool,
}

/// Check the file, then load every sink it names with its options, as a
/// start would, without touching the store. Exit 0, or 78 listing every
/// problem.
pub async fn check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let config = match args.config.load() {
        Ok(config) => config,
        Err(e) => return Ok(refuse_error(&args.config, &e, args.json)),
    };
    let runtime = Runtime::new(config.engine_config(), None)?;
    let loaded = match config.sources_settings() {
        Ok(settings) => crate::source::load_all(settings, &runtime, config.wal_mode()).await,
        Err(problems) => Err(problems),
    };
    let sources = match loaded {
        Ok(sources) => sources,
        Err(problems) => return Ok(refuse(&args.config.origin(), &problems, args.json)),
    };
    let sinks: usize = sources.iter().map(|s| s.sinks.len()).sum();
    if args.json {
        println!(
            "{}",
            serde_json::json!({"ok": true, "config": args.config.origin(), "wal": config.wal_mode().label(),
                "sources": sources.len(), "sinks": sinks})
        );
    } else {
        println!(
            "ok: {}: {} source(s), {sinks} sink(s) loaded and configured, wal {}",
            args.config.origin(),
            sources.len(),
            config.wal_mode().label()
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub struct PrintArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// JSON instead of YAML.
    #[arg(long)]
    json: bool,
}

/// The configuration in force, every default filled in, secrets redacted.
pub fn print(args: PrintArgs) -> anyhow::Result<ExitCode> {
    let config = match args.config.load() {
        Ok(config) => config,
        Err(e) => return Ok(refuse_error(&args.config, &e, false)),
    };
    let shown = crate::config::redacted(&config);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&shown)?);
    } else {
        print!("{}", serde_norway::to_string(&shown)?);
    }
    Ok(ExitCode::SUCCESS)
}
