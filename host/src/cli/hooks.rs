//! `ankusa hooks show`: one stored hook and each of its deliveries, with
//! why a retrying delivery's last attempt failed.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::Value;

use super::client::{AdminArgs, AdminClient, print_json};

#[derive(Debug, Args)]
pub struct HooksArgs {
    #[command(subcommand)]
    command: HooksCommand,
    #[command(flatten)]
    admin: AdminArgs,
}

#[derive(Debug, Subcommand)]
enum HooksCommand {
    /// Show one stored hook (`GET /v1/hooks/{seq}`) and its deliveries.
    Show {
        /// The hook's seq, as `ankusa dlq list` and the console show it.
        seq: u64,
    },
}

pub async fn hooks(args: HooksArgs) -> anyhow::Result<ExitCode> {
    let client = AdminClient::new(&args.admin.connection)?;
    let HooksCommand::Show { seq } = args.command;
    let hook = client.get(&format!("/v1/hooks/{seq}")).await?;
    if args.admin.json {
        print_json(&hook);
    } else {
        print!("{}", describe(&hook));
    }
    Ok(ExitCode::SUCCESS)
}

/// The hook as lines of text: its identity, then a line per delivery and,
/// under one that failed, the class and reason.
fn describe(hook: &Value) -> String {
    let text = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_string);
    let mut out = format!(
        "hook {} (seq {}) from source {}, tenant {}, {} bytes, received at {}\n",
        text(&hook["id"]),
        hook["seq"],
        text(&hook["source"]),
        text(&hook["tenant"]),
        hook["size"],
        hook["received_at"],
    );
    for delivery in hook["deliveries"].as_array().into_iter().flatten() {
        let mut line = format!(
            "  {:<16} {:<9} attempts {}",
            delivery["sink"].as_str().unwrap_or("?"),
            delivery["state"].as_str().unwrap_or("?"),
            delivery["attempts"]
        );
        if let Some(due) = delivery["due_at"].as_u64() {
            line.push_str(&format!(", next attempt at {due}"));
        }
        if let Some(dead) = delivery["dead_at"].as_u64() {
            line.push_str(&format!(", dead at {dead}"));
        }
        out.push_str(&line);
        out.push('\n');
        if let Some(reason) = delivery["reason"].as_str() {
            let class = delivery["error_class"].as_str().unwrap_or("-");
            let when = match delivery["failed_at"].as_u64() {
                Some(at) => format!("last attempt failed at {at}: "),
                None => String::new(),
            };
            out.push_str(&format!("    {class}: {when}{reason}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::describe;

    #[test]
    fn a_retrying_delivery_shows_why_its_last_attempt_failed() {
        let hook = json!({
            "id": "evt_1", "seq": 7, "source": "shop", "tenant": "default", "size": 12, "received_at": 5,
            "deliveries": [
                {"sink": "out", "state": "due", "attempts": 2, "due_at": 900, "reason": "wasm trap: unreachable",
                 "error_class": "fault", "failed_at": 800},
                {"sink": "log", "state": "delivered", "attempts": 0},
            ]
        });
        let text = describe(&hook);
        assert!(text.contains("out              due       attempts 2, next attempt at 900"), "{text}");
        assert!(text.contains("fault: last attempt failed at 800: wasm trap: unreachable"), "{text}");
        assert!(text.contains("log              delivered attempts 0\n"), "{text}");
    }
}
