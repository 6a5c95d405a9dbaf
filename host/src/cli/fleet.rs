//! `ankusa fleet status`: `/v1/fleet` of a running node, as a table or
//! (`--json`) as the API's own JSON.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::Value;

use super::client::{AdminArgs, AdminClient, print_json};

#[derive(Debug, Args)]
pub struct FleetArgs {
    #[command(subcommand)]
    command: FleetCommand,
    #[command(flatten)]
    admin: AdminArgs,
}

#[derive(Debug, Subcommand)]
enum FleetCommand {
    /// Nodes, their leases and lag, takeovers, and JetStream publishing.
    Status,
}

pub async fn fleet(args: FleetArgs) -> anyhow::Result<ExitCode> {
    let client = AdminClient::new(&args.admin.connection)?;
    let FleetCommand::Status = args.command;
    let status = client.get("/v1/fleet").await?;
    if args.admin.json {
        print_json(&status);
        return Ok(ExitCode::SUCCESS);
    }
    let text = |v: &Value| v.as_str().unwrap_or("?").to_string();
    println!(
        "node {} on stream {} (R{}); an ack survives {}",
        text(&status["node_id"]),
        text(&status["stream"]),
        status["replicas"],
        text(&status["ack_survives"])
    );
    println!("{:<16} {:<6} {:>12} {:>10} {:>8}  taken", "node", "alive", "heartbeat ms", "pending", "dead");
    for node in status["nodes"].as_array().into_iter().flatten() {
        let taken = match node["taken"].as_object() {
            Some(t) => format!(
                "by {} ({}): {} hooks, {} already delivered, {} dead letters",
                t.get("by").map_or("?".into(), text),
                t.get("state").map_or("?".into(), text),
                t.get("imported").unwrap_or(&Value::Null),
                t.get("delivered").unwrap_or(&Value::Null),
                t.get("dead_letters").unwrap_or(&Value::Null)
            ),
            None => "-".into(),
        };
        println!(
            "{:<16} {:<6} {:>12} {:>10} {:>8}  {taken}",
            text(&node["node"]),
            if node["alive"].as_bool() == Some(true) { "yes" } else { "NO" },
            node["heartbeat_age_ms"],
            node["lease"]["pending"],
            node["lease"]["dead"]
        );
    }
    let p = &status["publish"];
    println!(
        "publishing: {} rounds, {} hooks ({:.1} per round, mean {:.0} µs), {} duplicates, {} failures",
        p["rounds"],
        p["hooks"],
        p["hooks_per_round"].as_f64().unwrap_or(0.0),
        p["mean_round_us"].as_f64().unwrap_or(0.0),
        p["duplicates"],
        p["failures"]
    );
    Ok(ExitCode::SUCCESS)
}
