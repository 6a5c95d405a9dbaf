//! `ankusa dlq`, `ankusa replay` and `ankusa tenant`: the admin API from
//! the command line, as text or (`--json`) as the API's own JSON.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::client::{AdminArgs, AdminClient, print_json, query, spinner};

/// Filters of the DLQ, as `GET /v1/dlq` takes them.
#[derive(Debug, Clone, Args)]
pub struct DlqFilters {
    /// Only this source's rows.
    #[arg(long)]
    source: Option<String>,
    /// Only these tenants' rows (comma-separated).
    #[arg(long)]
    tenant: Option<String>,
    /// Only rows dead at or after this time: RFC 3339
    /// (`2026-12-06T09:00:00Z`), a duration ago (`10m`, `2h`, `1d`), or
    /// unix milliseconds.
    #[arg(long, value_parser = parse_since)]
    since: Option<u64>,
    /// Only this sink's rows (its name).
    #[arg(long)]
    sink: Option<String>,
    /// Only rows dead with this class.
    #[arg(long)]
    error_class: Option<String>,
}

/// A point in time as `--since` and `--until` take it, in unix
/// milliseconds.
fn parse_since(text: &str) -> Result<u64, String> {
    if let Ok(ms) = text.parse::<u64>() {
        return Ok(ms);
    }
    let now = std::time::SystemTime::now();
    let at = match humantime::parse_duration(text) {
        Ok(ago) => now.checked_sub(ago).ok_or_else(|| format!("{text} ago is before 1970"))?,
        Err(_) => humantime::parse_rfc3339_weak(text).map_err(|_| {
            format!("`{text}`: give RFC 3339 (2026-12-06T09:00:00Z), a duration ago (10m, 2h) or unix ms")
        })?,
    };
    let since = at.duration_since(std::time::UNIX_EPOCH).map_err(|_| format!("{text} is before 1970"))?;
    Ok(since.as_millis() as u64)
}

#[derive(Debug, Args)]
pub struct DlqArgs {
    #[command(subcommand)]
    command: DlqCommand,
    #[command(flatten)]
    admin: AdminArgs,
}

#[derive(Debug, Subcommand)]
enum DlqCommand {
    /// List dead rows, newest first.
    List {
        #[command(flatten)]
        filters: DlqFilters,
        /// Rows per page.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Continue from a previous page's cursor.
        #[arg(long)]
        cursor: Option<String>,
        /// Follow the cursor to the end.
        #[arg(long)]
        all: bool,
    },
}

pub async fn dlq(args: DlqArgs) -> anyhow::Result<ExitCode> {
    let client = AdminClient::new(&args.admin.connection)?;
    let DlqCommand::List { filters, limit, mut cursor, all } = args.command;
    let mut total = 0usize;
    loop {
        let path = format!(
            "/v1/dlq{}",
            query(&[
                ("source", filters.source.clone()),
                ("tenant", filters.tenant.clone()),
                ("since", filters.since.map(|v| v.to_string())),
                ("sink", filters.sink.clone()),
                ("error_class", filters.error_class.clone()),
                ("limit", Some(limit.to_string())),
                ("cursor", cursor.clone()),
            ])
        );
        let page = client.get(&path).await?;
        let entries = page["entries"].as_array().cloned().unwrap_or_default();
        total += entries.len();
        if args.admin.json {
            print_json(&page);
        } else {
            for e in &entries {
                println!(
                    "{}  {:<16} {:<12} {:<12} {:<10} attempts {:<3} {}",
                    e["id"].as_str().unwrap_or("?"),
                    e["source"].as_str().unwrap_or("?"),
                    e["tenant"].as_str().unwrap_or("?"),
                    e["sink"].as_str().unwrap_or("?"),
                    e["error_class"].as_str().unwrap_or("-"),
                    e["attempts"],
                    e["reason"].as_str().unwrap_or("")
                );
            }
        }
        cursor = page["next_cursor"].as_str().map(str::to_string);
        if !all || cursor.is_none() {
            break;
        }
    }
    if !args.admin.json {
        match &cursor {
            Some(next) => eprintln!("{total} row(s); more with --cursor {next}"),
            None => eprintln!("{total} row(s)"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    #[command(subcommand)]
    command: ReplayCommand,
    #[command(flatten)]
    admin: AdminArgs,
}

#[derive(Debug, Subcommand)]
enum ReplayCommand {
    /// Start a replay job.
    Start {
        /// What the job walks.
        #[arg(long, value_enum, default_value_t = Kind::Dlq)]
        kind: Kind,
        /// The job's id (a new one when absent).
        #[arg(long)]
        id: Option<String>,
        #[command(flatten)]
        filters: DlqFilters,
        /// `dlq`: dead before this time; `archive`: received before it (as
        /// `--since` takes a time). Default: when the job starts.
        #[arg(long, value_parser = parse_since)]
        until: Option<u64>,
        /// Rows moved per second at most.
        #[arg(long)]
        rate: Option<f64>,
        /// Pause while dispatch is later than this.
        #[arg(long)]
        max_lag_ms: Option<u64>,
        /// Follow the job until it ends, with its progress.
        #[arg(long)]
        wait: bool,
    },
    /// One job, or every job.
    Status {
        /// The job's id (every job when absent).
        id: Option<String>,
    },
    /// Pause a running job.
    Pause {
        /// The job's id, as `replay start` and `replay status` show it.
        id: String,
    },
    /// Resume a paused job.
    Resume {
        /// The job's id, as `replay start` and `replay status` show it.
        id: String,
    },
    /// Stop a job for good.
    Cancel {
        /// The job's id, as `replay start` and `replay status` show it.
        id: String,
    },
}

/// What a replay job walks, as `--kind` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Kind {
    /// Revive dead rows (filters: source, tenant, since, until, sink, error class).
    Dlq,
    /// Redrive archived hooks received in [since, until) (filters: source, tenant).
    Archive,
    /// Re-verify one source's held hooks and release those that pass (source, tenant).
    Quarantine,
}

impl Kind {
    fn job_kind(self) -> crate::replay::JobKind {
        match self {
            Kind::Dlq => crate::replay::JobKind::Dlq,
            Kind::Archive => crate::replay::JobKind::Archive,
            Kind::Quarantine => crate::replay::JobKind::Quarantine,
        }
    }
}

pub async fn replay(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let client = AdminClient::new(&args.admin.connection)?;
    let json = args.admin.json;
    let job = match args.command {
        ReplayCommand::Start { kind, id, filters, until, rate, max_lag_ms, wait } => {
            let mut body = json!({"kind": kind.job_kind()});
            let fields = [
                ("id", id.map(Value::from)),
                ("source", filters.source.map(Value::from)),
                ("since", filters.since.map(Value::from)),
                ("until", until.map(Value::from)),
                ("sink", filters.sink.map(Value::from)),
                ("error_class", filters.error_class.map(Value::from)),
                ("rate", rate.map(Value::from)),
                ("max_lag_ms", max_lag_ms.map(Value::from)),
            ];
            for (key, value) in fields {
                if let Some(value) = value {
                    body[key] = value;
                }
            }
            if let Some(tenants) = filters.tenant {
                let list: Vec<&str> = tenants.split(',').collect();
                // A quarantine job walks one tenant's pen; a dlq job filters.
                if kind == Kind::Quarantine {
                    body["tenant"] = json!(list.first());
                } else {
                    body["tenants"] = json!(list);
                }
            }
            let job = client.call("POST", "/v1/replays", Some(body)).await?;
            if wait { follow(&client, &job).await? } else { job }
        }
        ReplayCommand::Status { id: None } => {
            let jobs = client.get("/v1/replays").await?;
            if json {
                print_json(&jobs);
            } else {
                for job in jobs.as_array().into_iter().flatten() {
                    print_job(job);
                }
            }
            return Ok(ExitCode::SUCCESS);
        }
        ReplayCommand::Status { id: Some(id) } => client.get(&format!("/v1/replays/{id}")).await?,
        ReplayCommand::Pause { id } => set_state(&client, &id, "paused").await?,
        ReplayCommand::Resume { id } => set_state(&client, &id, "running").await?,
        ReplayCommand::Cancel { id } => set_state(&client, &id, "cancelled").await?,
    };
    if json {
        print_json(&job)
    } else {
        print_job(&job)
    }
    Ok(ExitCode::SUCCESS)
}

async fn set_state(client: &AdminClient, id: &str, state: &str) -> anyhow::Result<Value> {
    client.call("PATCH", &format!("/v1/replays/{id}"), Some(json!({"state": state}))).await
}

fn print_job(job: &Value) {
    println!(
        "{}  {:<10} {:<9} moved {:<8} throttled {} ms{}",
        job["id"].as_str().unwrap_or("?"),
        job["kind"].as_str().unwrap_or("?"),
        job["state"].as_str().unwrap_or("?"),
        job["moved"],
        job["throttled_ms"],
        job["reason"].as_str().map(|r| format!("  ({r})")).unwrap_or_default()
    );
}

/// Poll a job until it is no longer running, showing what it has moved.
async fn follow(client: &AdminClient, job: &Value) -> anyhow::Result<Value> {
    let id = job["id"].as_str().unwrap_or_default().to_string();
    let bar = spinner(&format!("replay {id}"));
    loop {
        let job = client.get(&format!("/v1/replays/{id}")).await?;
        bar.set_message(format!("replay {id}: {} moved", job["moved"]));
        if job["state"] != "running" {
            bar.finish_and_clear();
            return Ok(job);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[derive(Debug, Args)]
pub struct TenantArgs {
    #[command(subcommand)]
    command: TenantCommand,
    #[command(flatten)]
    admin: AdminArgs,
}

#[derive(Debug, Subcommand)]
enum TenantCommand {
    /// Rows, bytes and keys a tenant holds (from counters).
    Usage {
        /// The tenant's name.
        tenant: String,
    },
    /// Erase everything of a tenant.
    Erase {
        /// The tenant to erase.
        tenant: String,
        /// Required: erasing cannot be undone.
        #[arg(long)]
        yes: bool,
        /// Follow the erase until it ends, with its progress.
        #[arg(long)]
        wait: bool,
    },
    /// A tenant's erase job.
    Status {
        /// The tenant whose erase to show.
        tenant: String,
    },
}

pub async fn tenant(args: TenantArgs) -> anyhow::Result<ExitCode> {
    let client = AdminClient::new(&args.admin.connection)?;
    let answer = match args.command {
        TenantCommand::Usage { tenant } => client.get(&format!("/v1/tenants/{tenant}/usage")).await?,
        TenantCommand::Status { tenant } => client.get(&format!("/v1/tenants/{tenant}")).await?,
        TenantCommand::Erase { tenant, yes, wait } => {
            if !yes {
                eprintln!("error: erasing `{tenant}` deletes all of its data for good; pass --yes to confirm");
                return Ok(ExitCode::from(2));
            }
            let started = client.call("DELETE", &format!("/v1/tenants/{tenant}"), None).await?;
            if wait { follow_erase(&client, &tenant).await? } else { started }
        }
    };
    if args.admin.json {
        print_json(&answer);
    } else {
        for (key, value) in answer.as_object().into_iter().flatten() {
            println!("{key}: {value}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn follow_erase(client: &AdminClient, tenant: &str) -> anyhow::Result<Value> {
    let bar = spinner(&format!("erasing {tenant}"));
    loop {
        let erase = client.get(&format!("/v1/tenants/{tenant}")).await?;
        let phase = erase["phase"].as_str().unwrap_or("?").to_string();
        bar.set_message(format!("erasing {tenant}: {phase}, removed {}", erase["removed"]));
        if phase == "done" || phase == "failed" {
            bar.finish_and_clear();
            return Ok(erase);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::parse_since;

    #[test]
    fn since_takes_milliseconds_rfc_3339_and_durations_ago() {
        assert_eq!(parse_since("1800000000000"), Ok(1_800_000_000_000));
        assert_eq!(parse_since("2027-01-15T08:00:00Z"), Ok(1_800_000_000_000));
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_millis() as u64;
        let ago = now - parse_since("10m").expect("a duration");
        assert!((600_000..605_000).contains(&ago), "{ago}");
        assert!(parse_since("yesterday").is_err_and(|e| e.contains("RFC 3339")));
    }
}
