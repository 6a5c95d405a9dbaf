//! A server program a test runs on a free loopback port of its own, and
//! may kill (as a crash would) and start again on the same port.

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct LocalServer {
    pub port: u16,
    /// The command that starts it (on `port`).
    command: Box<dyn Fn(u16) -> Command + Send + Sync>,
    child: Option<Child>,
}

impl LocalServer {
    /// Pick a free port, start `command(port)` and wait until it accepts
    /// connections.
    pub fn start(command: impl Fn(u16) -> Command + Send + Sync + 'static) -> LocalServer {
        let port = TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("addr").port();
        let mut server = LocalServer { port, command: Box::new(command), child: None };
        server.resume();
        server
    }

    /// Kill it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start it again on the same port; returns once it accepts connections.
    pub fn resume(&mut self) {
        let mut command = (self.command)(self.port);
        let program = command.get_program().to_string_lossy().into_owned();
        let child = command.stdout(Stdio::null()).stderr(Stdio::null()).spawn();
        self.child = Some(child.unwrap_or_else(|e| panic!("cannot start {program}: {e}")));
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(started.elapsed() < Duration::from_secs(30), "{program} did not start on port {}", self.port);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        self.stop();
    }
}
