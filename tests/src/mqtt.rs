//! MQTT brokers for the `mqtt` sink's tests: the machine's Mosquitto
//! (127.0.0.1:1883, anonymous), or one of a test's own on a free loopback
//! port with a password file, which the test may stop and start again; and
//! a subscriber (`mosquitto_sub`) that reads back what was published,
//! through the broker rather than the sink's own MQTT code.

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::server::LocalServer;

pub const ADDR: &str = "127.0.0.1:1883";

/// A Mosquitto of the test's own, stopped when dropped.
pub struct Broker {
    pub server: LocalServer,
    _dir: tempfile::TempDir,
}

impl Broker {
    /// A broker that admits only `users` (name, password).
    pub fn start(users: &[(&str, &str)]) -> Broker {
        let dir = tempfile::tempdir().expect("dir");
        let passwords = dir.path().join("passwd");
        std::fs::write(&passwords, "").expect("password file");
        for (user, password) in users {
            let status = Command::new("mosquitto_passwd")
                .arg("-b")
                .arg(&passwords)
                .args([user, password])
                .status()
                .expect("run mosquitto_passwd");
            assert!(status.success(), "mosquitto_passwd failed");
        }
        let folder = dir.path().to_path_buf();
        let server = LocalServer::start(move |port| {
            let conf = folder.join(format!("mosquitto-{port}.conf"));
            let text = format!(
                "listener {port} 127.0.0.1\nallow_anonymous false\npassword_file {}\npersistence false\nlog_dest none\n",
                folder.join("passwd").display()
            );
            std::fs::write(&conf, text).expect("config");
            let mut command = Command::new("mosquitto");
            command.arg("-c").arg(conf);
            command
        });
        Broker { server, _dir: dir }
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.server.port)
    }
}

/// `mosquitto_sub` on `topic` at `addr` (host:port), waiting for `count`
/// messages; [`Subscriber::messages`] gives them, one per line.
pub struct Subscriber(Child);

impl Subscriber {
    pub fn start(addr: &str, topic: &str, count: usize, login: Option<(&str, &str)>) -> Subscriber {
        let (host, port) = addr.split_once(':').expect("host:port");
        let mut command = Command::new("mosquitto_sub");
        command.args(["-h", host, "-p", port, "-t", topic, "-q", "1", "-W", "20", "-C", &count.to_string()]);
        if let Some((user, password)) = login {
            command.args(["-u", user, "-P", password]);
        }
        let child = command.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("start mosquitto_sub");
        // mosquitto_sub has no "subscribed" signal on stdout; give it time
        // to connect and subscribe before anything is published.
        std::thread::sleep(Duration::from_millis(500));
        Subscriber(child)
    }

    /// The messages received, once `count` came (or the 20 s wait ended).
    pub fn messages(mut self) -> Vec<String> {
        let mut text = String::new();
        if let Some(mut out) = self.0.stdout.take() {
            let _ = out.read_to_string(&mut text);
        }
        let _ = self.0.wait();
        text.lines().map(str::to_string).collect()
    }
}

/// A topic no other test uses.
pub fn topic(name: &str) -> String {
    format!("ankusa-test/{name}/{}", std::process::id())
}
