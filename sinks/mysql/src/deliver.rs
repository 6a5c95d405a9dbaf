//! One hook, one row: `INSERT ... ON DUPLICATE KEY UPDATE id = id`, so a
//! retried or replayed delivery leaves the table as the first one did
//! (unlike `INSERT IGNORE`, every other error still fails the insert).

use ankusa_sdk::Hook;

use crate::client::{Connection, Login, MysqlError, Param};
use crate::options::Options;

/// A connection with the insert prepared on it.
pub struct Prepared {
    pub connection: Connection,
    insert: u32,
}

/// Connect, log in, make sure the table is there (with `create_table`) and
/// prepare the insert.
pub fn open(options: &Options) -> Result<Prepared, MysqlError> {
    let login = Login { user: &options.user, password: options.password.as_deref(), database: &options.database };
    let mut connection = Connection::open(&options.addr, &login, options.timeout)?;
    // `received_at` goes in through FROM_UNIXTIME, which reads the
    // session's time zone.
    connection.query("SET time_zone = '+00:00'")?;
    if options.create_table {
        connection.query(&create_table(&options.table))?;
    }
    let insert = connection.prepare(&insert_statement(&options.table))?;
    Ok(Prepared { connection, insert })
}

pub fn insert_statement(table: &str) -> String {
    format!(
        "INSERT INTO {table} (id, seq, source, tenant, received_at, content_type, sha256, dedupe_key, \
         idempotency_key, replay_id, body) \
         VALUES (?, ?, ?, ?, FROM_UNIXTIME(? / 1000), ?, ?, ?, ?, ?, ?) \
         ON DUPLICATE KEY UPDATE id = id"
    )
}

/// Insert `hook`'s row; `ok` once the server committed it (autocommit).
pub fn exchange(prepared: &mut Prepared, hook: &Hook) -> Result<(), MysqlError> {
    let params = [
        Param::Text(&hook.id),
        Param::U64(hook.seq),
        Param::Text(&hook.source),
        Param::Text(&hook.tenant),
        Param::U64(hook.received_at),
        text(&hook.content_type),
        Param::Text(&hook.sha256),
        text(&hook.dedupe_key),
        Param::Text(&hook.idempotency_key),
        text(&hook.replay_id),
        Param::Bytes(&hook.body),
    ];
    prepared.connection.execute(prepared.insert, &params)
}

fn create_table(table: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {table} (\
           id VARCHAR(64) NOT NULL PRIMARY KEY, \
           seq BIGINT UNSIGNED NOT NULL, \
           source VARCHAR(255) NOT NULL, \
           tenant VARCHAR(255) NOT NULL, \
           received_at DATETIME(3) NOT NULL, \
           content_type VARCHAR(255) NULL, \
           sha256 CHAR(64) NOT NULL, \
           dedupe_key VARCHAR(255) NULL, \
           idempotency_key VARCHAR(255) NOT NULL, \
           replay_id VARCHAR(64) NULL, \
           body LONGBLOB NOT NULL, \
           delivered_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)\
         ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
    )
}

fn text(value: &Option<String>) -> Param<'_> {
    value.as_deref().map_or(Param::Null, Param::Text)
}
