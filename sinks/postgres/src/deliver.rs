//! One hook, one row: `INSERT ... ON CONFLICT (id) DO NOTHING`, so a
//! retried or replayed delivery leaves the table as the first one did.

use ankusa_sdk::Hook;
use ankusa_sdk::bindings::wasi::random::random::get_random_u64;

use crate::client::{Connection, Login, Param, PgError};
use crate::options::Options;

/// The insert of one hook's row into `table`.
pub fn insert_statement(table: &str) -> String {
    format!(
        "INSERT INTO {table} (id, seq, source, tenant, received_at, content_type, sha256, dedupe_key, \
             idempotency_key, replay_id, body) \
             VALUES ($1, $2::bigint, $3, $4, to_timestamp($5::bigint / 1000.0), $6, $7, $8, $9, $10, $11::bytea) \
             ON CONFLICT (id) DO NOTHING"
    )
}

/// Insert `hook`'s row with `insert` (see [`insert_statement`]).
pub fn exchange(insert: &str, connection: &mut Connection, hook: &Hook) -> Result<(), PgError> {
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
    connection.execute(insert, &params).map(|_| ())
}

/// Connect, log in and (with `create_table`) make sure the table is there.
pub fn open(options: &Options) -> Result<Connection, PgError> {
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
