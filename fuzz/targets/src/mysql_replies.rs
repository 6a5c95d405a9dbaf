//! The mysql sink's protocol client against a scripted server: any bytes
//! in answer to the greeting, the login (native password, caching_sha2,
//! plugin switches), queries, a prepare and executes give a result or a
//! typed error, never a panic or an unbounded allocation.

use crate::shared::Scripted;
use ankusa_sink_mysql::client::{Connection, Login, Param};

pub fn run(data: &[u8]) {
    let Some((&login, server)) = data.split_first() else { return };
    let login = Login { user: "ankusa", password: (login % 2 == 0).then_some("secret"), database: "hooks" };
    let Ok(mut connection) = Connection::start(Scripted::new(server), &login) else { return };
    if connection.query("SET time_zone = '+00:00'").is_err() {
        return;
    }
    let Ok(insert) = connection.prepare("INSERT INTO hooks VALUES (?, ?, ?, ?)") else { return };
    let params = [Param::Text("0193"), Param::U64(7), Param::Bytes(b"{}"), Param::Null];
    for _ in 0..4 {
        if connection.execute(insert, &params).is_err() {
            break;
        }
    }
}
