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
    #[arg(long, help = super::client::JSON_HELP)]
    json: bool,
}

/// Check the file, then load every sink it names with its options, as a
/// start would, without touching the store. Exit 0, or 78 listing every
/// problem.
pub async fn check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let (config, problems) = match args.config.load() {
        Ok(config) => (config, Vec::new()),
        Err(ConfigError::Invalid { problems, partial: Some(config), .. }) => (*config, problems),
        Err(e) => return Ok(refuse_error(&args.config, &e, args.json)),
    };
    // Compiled into the user's cache (or `runtime.cache_dir`), never into
    // the node's data directory, which a check does not touch.
    let cache = config.runtime.cache_dir.clone().unwrap_or_else(|| crate::authoring::tools::user_cache("components"));
    let runtime = Runtime::new(config.engine_config(), Some(cache))?;
    let mut problems = problems;
    problems.extend(destinations_outside_allow(&config));
    let loaded = match config.sources_settings() {
        // Every other key is right: the sinks load as a start loads them.
        Ok(settings) if problems.is_empty() => crate::source::load_all(settings, &runtime, config.wal_mode()).await,
        // Some are not: the sinks are still loaded, so their problems are
        // listed with the rest rather than after a fix of those.
        _ => {
            problems.extend(unloadable_sinks(&config, &runtime, &problems).await);
            Err(problems)
        }
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

/// The problems of each configured sink and transform that loads with its
/// options (`problems` already names none of its keys).
async fn unloadable_sinks(config: &Config, runtime: &Runtime, problems: &[Problem]) -> Vec<Problem> {
    // Whether `problems` already names a key of `section`.
    let named = |section: &str| {
        problems.iter().any(|p| p.key == section || p.key.strip_prefix(section).is_some_and(|k| k.starts_with('.')))
    };
    let mut found = Vec::new();
    for name in config.sinks.keys().filter(|name| !named(&format!("sinks.{name}"))) {
        let Some(spec) = config.sink_spec("check-config", name) else { continue };
        if let Err(e) = runtime.load(spec).await {
            found.push(Problem::new(crate::source::load_error_key(&e), e.to_string()));
        }
    }
    for name in config.transforms.keys().filter(|name| !named(&format!("transforms.{name}"))) {
        let Some(spec) = config.transform_spec(name) else { continue };
        if let Err(e) = runtime.load_transform(spec).await {
            found.push(Problem::new(crate::source::load_error_key(&e), e.to_string()));
        }
    }
    found
}

/// A sink whose options name a destination its `allow` list does not
/// admit would be refused on every delivery: each such option, with the
/// entry that would admit it.
fn destinations_outside_allow(config: &Config) -> Vec<Problem> {
    let mut found = Vec::new();
    for (name, sink) in &config.sinks {
        // An allow list that does not parse is a problem of its own.
        let Ok(policy) = crate::runtime::egress::EgressPolicy::new(&sink.allow, &sink.allow_networks) else {
            continue;
        };
        for (destination, refusal) in policy.refused_destinations(&sink.options) {
            // A URL's password is not printed.
            let mut named = serde_json::Value::String(destination.named.clone());
            crate::config::redact_options(&mut named);
            let named = named.as_str().unwrap_or_default().to_string();
            found.push(Problem::new(
                format!("sinks.{name}.options.{}", destination.key),
                format!(
                    "{named}: {refusal}, so every delivery would be refused; add \"{}\" to sinks.{name}.allow",
                    destination.allow_entry()
                ),
            ));
        }
    }
    found
}

#[derive(Debug, Args)]
pub struct PrintArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// JSON instead of YAML.
    #[arg(long)]
    json: bool,
}

/// The first line of a printed configuration.
const PRINTED_HEADER: &str = "# The configuration in force, defaults filled in. Secrets are shown as <redacted>: \
a file saved from this output does not load until they are put back.";

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
        // JSON has no comments: there the marker itself says it.
        println!("{PRINTED_HEADER}");
        print!("{}", serde_norway::to_string(&shown)?);
    }
    Ok(ExitCode::SUCCESS)
}
