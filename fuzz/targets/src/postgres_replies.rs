//! The postgres sink's protocol client against a scripted backend: any
//! bytes in answer to start-up, login (cleartext, md5, SCRAM-SHA-256),
//! statements and a pipeline of them give a result or a typed error (at
//! most one per statement), never a panic or an unbounded allocation.

use crate::shared::Scripted;
use ankusa_sink_postgres::client::{Connection, Login, Param};

pub fn run(data: &[u8]) {
    let Some((&login, server)) = data.split_first() else { return };
    let login = Login {
        user: "ankusa",
        password: (login % 2 == 0).then_some("secret"),
        database: "hooks",
        nonce: "rOprNGfwEbeRWgbNEkqO".into(),
    };
    let Ok(mut connection) = Connection::start(Scripted::new(server), &login) else { return };
    if connection.simple_query("CREATE TABLE IF NOT EXISTS hooks (id text)").is_err() {
        return;
    }
    let params = [Param::Text("0193"), Param::Binary(b"{}"), Param::Null];
    for _ in 0..4 {
        if connection.execute("INSERT INTO hooks VALUES ($1, $2, $3)", &params).is_err() {
            break;
        }
    }
    let statement = || ("INSERT INTO hooks VALUES ($1, $2, $3)", vec![Param::Text("0193"), Param::Null, Param::Null]);
    let answers = connection.execute_pipelined(&[statement(), statement()]);
    assert!(answers.len() <= 2, "at most one answer per statement");
}
