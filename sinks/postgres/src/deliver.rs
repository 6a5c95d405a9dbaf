//! One hook, one row: `INSERT ... ON CONFLICT (id) DO NOTHING`, so a
//! retried or replayed delivery leaves the table as the first one did.

use ankusa_sdk::bindings::wasi::random::random::get_random_u64;
use ankusa_sdk::tcp::{Kept, connection_failure, is_timeout};
use ankusa_sdk::{Failure, Hook};

use crate::options::Options;
use crate::wire::{Connection, Login, Param, PgError};

pub struct Delivery {
    options: Options,
    insert: String,
    connection: Kept<Connection>,
}

impl Delivery {
    pub fn new(options: Options) -> Delivery {
        let insert = format!(
            "INSERT INTO {} (id, seq, source, tenant, received_at, content_type, sha256, dedupe_key, \
             idempotency_key, replay_id, body) \
             VALUES ($1, $2::bigint, $3, $4, to_timestamp($5::bigint / 1000.0), $6, $7, $8, $9, $10, $11::bytea) \
             ON CONFLICT (id) DO NOTHING",
            options.table
        );
        Delivery { options, insert, connection: Kept::default() }
    }

    pub fn deliver(&mut self, hook: &Hook) -> Result<(), Failure> {
        let seq = hook.seq.to_string();
        let received_at = hook.received_at.to_string();
        let params = [
            Param::Text(&hook.id),
            Param::Text(&seq),
            Param::Text(&hook.source),
            Param::Text(&hook.tenant),
            Param::Text(&received_at),
            text(&hook.content_type),
            Param::Text(&hook.sha256),
            text(&hook.dedupe_key),
            Param::Text(&hook.idempotency_key),
            text(&hook.replay_id),
            Param::Binary(&hook.body),
        ];
        let (options, insert) = (&self.options, &self.insert);
        let done = self.connection.exchange(
            || open(options),
            |connection| connection.execute(insert, &params),
            // An error the server reported leaves the connection itself fine.
            |done| matches!(done, Ok(_) | Err(PgError::Server { .. })),
            // A kept connection the server dropped meanwhile: insert again
            // on a fresh one (the row's id makes a repeat harmless).
            |error| matches!(error, PgError::Io(error) if !is_timeout(error)),
        );
        done.map(|_| ()).map_err(failure)
    }
}

fn open(options: &Options) -> Result<Connection, PgError> {
    let nonce = format!("{:016x}{:016x}", get_random_u64(), get_random_u64());
    let login =
        Login { user: &options.user, password: options.password.as_deref(), database: &options.database, nonce };
    let mut connection = Connection::open(options.addr, &login, options.timeout)?;
    if options.create_table {
        match connection.simple_query(&create_table(&options.table)) {
            // Instances creating the table at once: one wins, the others
            // trip over its table or row type (unique violation,
            // duplicate table, duplicate object) and go on to insert.
            Err(PgError::Server { code, .. }) if ["23505", "42P07", "42710"].contains(&code.as_str()) => {}
            other => other?,
        }
    }
    Ok(connection)
}

fn text(value: &Option<String>) -> Param<'_> {
    value.as_deref().map_or(Param::Null, Param::Text)
}

fn create_table(table: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {table} (\
           id text PRIMARY KEY, \
           seq bigint NOT NULL, \
           source text NOT NULL, \
           tenant text NOT NULL, \
           received_at timestamptz NOT NULL, \
           content_type text, \
           sha256 text NOT NULL, \
           dedupe_key text, \
           idempotency_key text NOT NULL, \
           replay_id text, \
           body bytea NOT NULL, \
           delivered_at timestamptz NOT NULL DEFAULT now())"
    )
}

fn failure(err: PgError) -> Failure {
    match err {
        PgError::Io(error) => connection_failure("postgres", &error),
        PgError::Login(message) => Failure::permanent(format!("postgres login: {message}")),
        PgError::Protocol(message) => Failure::transient(format!("postgres: {message}")),
        PgError::Server { code, message } => {
            let reason = format!("postgres {code}: {message}");
            if retryable(&code) { Failure::transient(reason) } else { Failure::permanent(reason) }
        }
    }
}

/// SQLSTATE classes worth retrying: the connection, a rolled-back
/// transaction (serialization, deadlock), resources (disk full, too many
/// connections), operator intervention (shutdown, start-up), system errors.
/// Everything else (login, privileges, a missing table or column, bad data)
/// needs someone to change something first.
fn retryable(code: &str) -> bool {
    matches!(code.get(..2), Some("08" | "40" | "53" | "57" | "58" | "XX")) || code.is_empty()
}
