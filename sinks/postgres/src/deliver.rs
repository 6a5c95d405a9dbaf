//! One hook, one row: `INSERT ... ON CONFLICT (id) DO NOTHING`, so a
//! retried or replayed delivery leaves the table as the first one did. A
//! batch is one multi-row insert (one transaction, one commit); if the
//! server refuses it, each row is inserted on its own, all in one round
//! trip, so only the rows the server refuses fail.

use ankusa_sdk::Hook;
use ankusa_sdk::bindings::wasi::random::random::get_random_u64;

use crate::client::{Connection, Login, Param, PgError};
use crate::options::Options;

/// Parameters per row; a statement takes at most 65 535.
const PARAMS_PER_ROW: usize = 11;
/// Rows per multi-row insert (a larger batch is several, in one round trip).
const ROWS_PER_INSERT: usize = 1000;

/// The insert of one hook's row into `table`.
pub fn insert_statement(table: &str) -> String {
    insert_rows_statement(table, 1)
}

/// The insert of `rows` hooks' rows into `table`, in one statement.
fn insert_rows_statement(table: &str, rows: usize) -> String {
    let mut sql = format!(
        "INSERT INTO {table} (id, seq, source, tenant, received_at, content_type, sha256, dedupe_key, \
             idempotency_key, replay_id, body) VALUES "
    );
    for row in 0..rows {
        let p = |i: usize| row * PARAMS_PER_ROW + i;
        if row > 0 {
            sql.push_str(", ");
        }
        sql.push_str(&format!(
            "(${}, ${}::bigint, ${}, ${}, to_timestamp(${}::bigint / 1000.0), ${}, ${}, ${}, ${}, ${}, ${}::bytea)",
            p(1),
            p(2),
            p(3),
            p(4),
            p(5),
            p(6),
            p(7),
            p(8),
            p(9),
            p(10),
            p(11)
        ));
    }
    sql.push_str(" ON CONFLICT (id) DO NOTHING");
    sql
}

/// A hook's numbers as the text its parameters are sent as.
struct Numbers {
    seq: String,
    received_at: String,
}

impl Numbers {
    fn of(hook: &Hook) -> Numbers {
        Numbers { seq: hook.seq.to_string(), received_at: hook.received_at.to_string() }
    }
}

fn push_params<'a>(params: &mut Vec<Param<'a>>, hook: &'a Hook, numbers: &'a Numbers) {
    params.extend([
        Param::Text(&hook.id),
        Param::Text(&numbers.seq),
        Param::Text(&hook.source),
        Param::Text(&hook.tenant),
        Param::Text(&numbers.received_at),
        text(&hook.content_type),
        Param::Text(&hook.sha256),
        text(&hook.dedupe_key),
        Param::Text(&hook.idempotency_key),
        text(&hook.replay_id),
        Param::Binary(&hook.body),
    ]);
}

/// Insert `hook`'s row with `insert` (see [`insert_statement`]).
pub fn exchange(insert: &str, connection: &mut Connection, hook: &Hook) -> Result<(), PgError> {
    let numbers = Numbers::of(hook);
    let mut params = Vec::with_capacity(PARAMS_PER_ROW);
    push_params(&mut params, hook, &numbers);
    connection.execute(insert, &params).map(|_| ())
}

/// Insert every hook's row: a multi-row insert per [`ROWS_PER_INSERT`]
/// hooks, all in one round trip; the rows of an insert the server refused
/// once more one by one (again in one round trip), so each hook's result
/// is its own row's. See `Protocol::exchange_batch` for the shape.
pub fn exchange_batch(
    table: &str,
    insert: &str,
    connection: &mut Connection,
    hooks: &[Hook],
) -> Result<Vec<Result<(), PgError>>, PgError> {
    let numbers: Vec<Numbers> = hooks.iter().map(Numbers::of).collect();
    let chunks: Vec<std::ops::Range<usize>> =
        (0..hooks.len()).step_by(ROWS_PER_INSERT).map(|at| at..(at + ROWS_PER_INSERT).min(hooks.len())).collect();
    let statements: Vec<(String, Vec<Param>)> = chunks
        .iter()
        .map(|range| {
            let mut params = Vec::with_capacity(range.len() * PARAMS_PER_ROW);
            for i in range.clone() {
                push_params(&mut params, &hooks[i], &numbers[i]);
            }
            (insert_rows_statement(table, range.len()), params)
        })
        .collect();
    let answers = connection.execute_pipelined(&statements);

    let mut results = Vec::with_capacity(hooks.len());
    for (range, answer) in chunks.into_iter().zip(answers) {
        match answer {
            Ok(_) => results.extend(range.map(|_| Ok(()))),
            Err(PgError::Server { .. }) => {
                let singles: Vec<(&str, Vec<Param>)> = range
                    .clone()
                    .map(|i| {
                        let mut params = Vec::with_capacity(PARAMS_PER_ROW);
                        push_params(&mut params, &hooks[i], &numbers[i]);
                        (insert, params)
                    })
                    .collect();
                let answers = connection.execute_pipelined(&singles);
                let broken = answers.len() < range.len();
                results.extend(answers.into_iter().map(|answer| answer.map(|_| ())));
                if broken {
                    return Ok(results);
                }
            }
            // The connection broke: nothing after this was answered.
            Err(error) if results.is_empty() => return Err(error),
            Err(error) => {
                results.push(Err(error));
                return Ok(results);
            }
        }
    }
    Ok(results)
}

/// Connect, log in and (with `create_table`) make sure the table is there.
pub fn open(options: &Options) -> Result<Connection, PgError> {
    let nonce = format!("{:016x}{:016x}", get_random_u64(), get_random_u64());
    let login =
        Login { user: &options.user, password: options.password.as_deref(), database: &options.database, nonce };
    let mut connection = Connection::open(&options.addr, &login, options.timeout)?;
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
